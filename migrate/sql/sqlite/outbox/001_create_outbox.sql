-- The outbox table: one row per message. See docs/sql-contract.md.
-- Times are unix microseconds. A row inserted with only topic and payload is
-- valid: the id, headers and times come from the defaults.
CREATE TABLE {{table}} (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id      TEXT    NOT NULL DEFAULT (lower(hex(randomblob(16)))),
    topic           TEXT    NOT NULL CHECK (topic <> ''),
    ordering_key    TEXT,
    payload         BLOB    NOT NULL,
    headers         TEXT    NOT NULL DEFAULT '{}',
    created_at      INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    last_error      TEXT,
    published_at    INTEGER,
    dead_at         INTEGER,
    claim_token     TEXT,
    claimed_until   INTEGER
);

CREATE INDEX {{index "pending"}} ON {{table}} (id)
    WHERE published_at IS NULL AND dead_at IS NULL;

CREATE INDEX {{index "key"}} ON {{table}} (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND published_at IS NULL;

CREATE INDEX {{index "published"}} ON {{table}} (published_at)
    WHERE published_at IS NOT NULL;
