-- An inbox table on MySQL 8 / MariaDB: one row per (source, message id) a
-- consumer has received. See docs/guide/inbox.md. Times are UTC. The primary key
-- is what makes handling exactly-once: a second copy of a message conflicts
-- with the first one's row. source and message_id are VARBINARY: compared
-- byte for byte, never case-folded or padded (a _ci or PAD SPACE collation
-- would make 'ID' a duplicate of 'id ' and skip a handler). 1024 bytes hold
-- 256 characters of UTF-8; a longer value fails the insert (strict mode)
-- rather than being truncated into a false duplicate. duplicates counts the
-- redeliveries seen: the duplicate path always changes the row, which makes
-- the affected-rows answer unambiguous (see inbox/sql/mysql.sql).
CREATE TABLE IF NOT EXISTS {{table}} (
    source       VARBINARY(1024) NOT NULL,
    message_id   VARBINARY(1024) NOT NULL,
    received_at  DATETIME(6)     NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    processed_at DATETIME(6)     NULL,
    metadata     LONGTEXT        CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    duplicates   BIGINT          NOT NULL DEFAULT 0,
    CONSTRAINT {{ident "source_check"}} CHECK (source <> ''),
    CONSTRAINT {{ident "message_id_check"}} CHECK (message_id <> ''),
    PRIMARY KEY (source, message_id),
    INDEX {{index "received"}} (received_at)
) ENGINE = InnoDB;
