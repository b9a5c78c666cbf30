-- Lanes: partitioned claims for several relays (docs/scaling.md).
--
-- Every row belongs to one of 16 lanes, a hash of its ordering key (of its
-- message id when it has none, so unkeyed rows spread evenly). The column
-- is generated, so plain-SQL writers fill it too, and all rows of a key
-- share a lane. A relay with Config.Lanes claims only from the lanes it
-- holds a lease on in <table>_lanes; relays without it ignore the column.
--
-- Adding a stored generated column rewrites the table under an ACCESS
-- EXCLUSIVE lock: on a large outbox, run this migration when the backlog is
-- small (delivered rows can be cleaned up first).
ALTER TABLE {{table}} ADD COLUMN lane smallint NOT NULL
    GENERATED ALWAYS AS ((hashtext(coalesce(ordering_key, message_id)) & 15)::smallint) STORED;

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
