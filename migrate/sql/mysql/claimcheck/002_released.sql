-- When a sweep (claimcheck.Store.Sweep, the relay's cleanup) first found
-- the payload's message delivered: no row of the outbox still to deliver
-- or dead refers to it; UTC, NULL until then. The payload is deleted once
-- it has been released for the retention period
-- (docs/guide/claim-check.md). Sweep looks rows up by it (the index).
ALTER TABLE {{table}}
    ADD COLUMN released_at DATETIME(6) NULL,
    ADD INDEX {{index "released"}} (released_at);
