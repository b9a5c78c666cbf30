-- A claim check table: payloads too large for the broker, one row per
-- reference (txbox.HeaderClaimCheck). See docs/guide/claim-check.md.
-- Times are unix microseconds. Outbox.Add writes a row in the caller's
-- transaction; consumers read it by ref; retention
-- (claimcheck.Store.Sweep) deletes rows by age.
CREATE TABLE {{table}} (
    ref        TEXT    NOT NULL PRIMARY KEY CHECK (ref <> ''),
    payload    BLOB    NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
);

-- Sweep deletes rows by age.
CREATE INDEX {{index "created"}} ON {{table}} (created_at);
