-- A claim check table: payloads too large for the broker, one row per
-- reference (txbox.HeaderClaimCheck). Times are unix microseconds.
-- Outbox.Add writes a row in the caller's transaction; consumers read it
-- by ref. A payload is kept while a row of the outbox still to deliver or
-- dead refers to it, and for the retention period after a sweep
-- (claimcheck.Store.Sweep, the relay's cleanup) found it released; see
-- docs/guide/claim-check.md.
CREATE TABLE {{table}} (
    ref         TEXT    NOT NULL PRIMARY KEY CHECK (ref <> ''),
    payload     BLOB    NOT NULL,
    created_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    -- When a sweep first found the payload's message delivered: no row of
    -- the outbox still to deliver or dead refers to it. NULL until then.
    released_at INTEGER
);

-- Stats reads the oldest payload's age.
CREATE INDEX {{index "created"}} ON {{table}} (created_at);
-- Sweep looks up the payloads not yet released and those released before
-- the retention period.
CREATE INDEX {{index "released"}} ON {{table}} (released_at);
