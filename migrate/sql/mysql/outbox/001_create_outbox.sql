-- The outbox table on MySQL 8 / MariaDB 10.6 or later (SKIP LOCKED): one row
-- per message. See docs/sql-contract.md. Times are UTC (UTC_TIMESTAMP(6)),
-- whatever the session's time zone. MySQL has no partial indexes: the
-- pending index leads with (published_at, dead_at), so the relay's scan of
-- "both NULL" reads only pending rows. MySQL DDL commits implicitly, so every
-- statement is written to be re-runnable (IF NOT EXISTS): an Up interrupted
-- between the DDL and its bookkeeping row simply runs again.
CREATE TABLE IF NOT EXISTS {{table}} (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    message_id      VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT (UUID()),
    topic           VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    ordering_key    VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    payload         LONGBLOB     NOT NULL,
    headers         LONGTEXT     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT ('{}'),
    created_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    attempts        INT          NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(6)  NULL,
    last_error      TEXT         NULL,
    published_at    DATETIME(6)  NULL,
    dead_at         DATETIME(6)  NULL,
    CONSTRAINT {{ident "topic_check"}} CHECK (topic <> ''),
    INDEX {{index "pending"}} (published_at, dead_at, id),
    INDEX {{index "key"}} (ordering_key, published_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
