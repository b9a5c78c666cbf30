-- A claim check table: payloads too large for the broker, one row per
-- reference (txbox.HeaderClaimCheck). Outbox.Add writes a row in the
-- caller's transaction; consumers read it by ref. A payload is kept while
-- a row of the outbox still to deliver or dead refers to it, and for the
-- retention period after a sweep (claimcheck.Store.Sweep, the relay's
-- cleanup) found it released; see docs/guide/claim-check.md.
CREATE TABLE {{table}} (
    ref         text        NOT NULL PRIMARY KEY CHECK (ref <> ''),
    payload     bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- When a sweep first found the payload's message delivered: no row of
    -- the outbox still to deliver or dead refers to it. NULL until then.
    released_at timestamptz
);

-- Stats reads the oldest payload's age.
CREATE INDEX {{index "created"}} ON {{table}} (created_at);
-- Sweep looks up the payloads not yet released and those released before
-- the retention period.
CREATE INDEX {{index "released"}} ON {{table}} (released_at);
