-- A claim check table on MySQL 8 / MariaDB: payloads too large for the
-- broker, one row per reference (txbox.HeaderClaimCheck). See
-- docs/guide/claim-check.md. Times are UTC. ref is VARBINARY: compared
-- byte for byte. A payload is at most max_allowed_packet bytes.
CREATE TABLE IF NOT EXISTS {{table}} (
    ref        VARBINARY(1024) NOT NULL,
    payload    LONGBLOB        NOT NULL,
    created_at DATETIME(6)     NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    CONSTRAINT {{ident "ref_check"}} CHECK (ref <> ''),
    PRIMARY KEY (ref),
    INDEX {{index "created"}} (created_at)
) ENGINE = InnoDB;
