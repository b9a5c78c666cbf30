-- When a sweep (claimcheck.Store.Sweep, the relay's cleanup) first found
-- the payload's message delivered: no row of the outbox still to deliver
-- or dead refers to it. NULL until then. The payload is deleted once it
-- has been released for the retention period (docs/guide/claim-check.md).
ALTER TABLE {{table}} ADD COLUMN released_at timestamptz;

-- Sweep looks up the payloads not yet released and those released before
-- the retention period.
CREATE INDEX {{index "released"}} ON {{table}} (released_at);
