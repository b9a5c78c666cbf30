-- A claim check table: payloads too large for the broker, one row per
-- reference (txbox.HeaderClaimCheck). See docs/guide/claim-check.md.
-- Outbox.Add writes a row in the caller's transaction; consumers read it
-- by ref; retention (claimcheck.Store.Sweep) deletes rows by age.
CREATE TABLE {{table}} (
    ref        text        NOT NULL PRIMARY KEY CHECK (ref <> ''),
    payload    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Sweep deletes rows by age.
CREATE INDEX {{index "created"}} ON {{table}} (created_at);
