-- Lanes: partitioned claims for several relays (docs/scaling.md).
--
-- A keyed row belongs to one of 16 lanes, hashtext(ordering_key) & 15, so
-- all rows of a key share a lane. A relay with Config.Lanes claims keyed
-- rows only from the lanes it holds a lease on in <table>_lanes; relays
-- without it ignore lanes. The lane is computed by the claim, not stored:
-- a stored generated column would rewrite the whole table under an ACCESS
-- EXCLUSIVE lock when this migration runs, stalling every writer of a
-- large outbox meanwhile.

-- One lease per lane: the relay that owns it, the fencing epoch (raised by
-- each takeover), and when the lease ends unless its owner renews it.
CREATE TABLE {{name "lanes"}} (
    lane       smallint    PRIMARY KEY CHECK (lane BETWEEN 0 AND 15),
    owner      text,
    epoch      bigint      NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO {{name "lanes"}} (lane) SELECT generate_series(0, 15);

-- The relays that take part, each renewing its row with its leases: their
-- number sets each relay's share of the lanes.
CREATE TABLE {{name "relays"}} (
    relay      text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
