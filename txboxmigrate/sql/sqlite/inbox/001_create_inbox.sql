-- An inbox table: one row per (source, message id) a consumer has received.
-- See docs/guide/inbox.md. Times are unix microseconds. The primary key is what
-- makes handling exactly-once: a second copy of a message conflicts with the
-- first one's row.
CREATE TABLE {{table}} (
    source       TEXT    NOT NULL CHECK (source <> ''),
    message_id   TEXT    NOT NULL CHECK (message_id <> ''),
    received_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    processed_at INTEGER,
    metadata     TEXT,
    PRIMARY KEY (source, message_id)
);

-- Sweep deletes rows by age of receipt.
CREATE INDEX {{index "received"}} ON {{table}} (received_at);
