-- A claim check table on MySQL 8 / MariaDB: payloads too large for the
-- broker, one row per reference (txbox.HeaderClaimCheck). Times are UTC.
-- ref is VARBINARY: compared byte for byte. A payload is at most
-- max_allowed_packet bytes. Outbox.Add writes a row in the caller's
-- transaction; consumers read it by ref. A payload is kept while a row of
-- the outbox still to deliver or dead refers to it, and for the retention
-- period after a sweep (claimcheck.Store.Sweep, the relay's cleanup) found
-- it released; see docs/guide/claim-check.md.
--
-- released_at: when a sweep first found the payload's message delivered
-- (no row of the outbox still to deliver or dead refers to it); NULL until
-- then. Sweep looks up the payloads not yet released and those released
-- before the retention period by its index; Stats reads the oldest
-- payload's age by created's.
CREATE TABLE IF NOT EXISTS {{table}} (
    ref         VARBINARY(1024) NOT NULL,
    payload     LONGBLOB        NOT NULL,
    created_at  DATETIME(6)     NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    released_at DATETIME(6)     NULL,
    CONSTRAINT {{ident "ref_check"}} CHECK (ref <> ''),
    PRIMARY KEY (ref),
    INDEX {{index "created"}} (created_at),
    INDEX {{index "released"}} (released_at)
) ENGINE = InnoDB;
