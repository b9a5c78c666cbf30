-- Lanes: partitioned claims for several relays (docs/scaling.md), as in
-- PostgreSQL's 006_lanes. A keyed row belongs to one of 16 lanes,
-- CRC32(ordering_key) & 15 (NULL without a key: any relay claims those), so
-- all rows of a key share a lane. The lane column is VIRTUAL: adding it
-- changes only the table's metadata (no rebuild, no long lock on MySQL 8 or
-- MariaDB 10.6+), and it is computed when a row is read. It has no index:
-- the claim reads pending rows in id order through the pending index and
-- reads each row anyway.
--
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: an Up interrupted after this
-- ALTER but before its bookkeeping row fails on the next run with a
-- duplicate column; the column is in place, so run the CREATE and INSERT
-- statements below by hand and insert the row into txbox_migrations.
ALTER TABLE {{table}}
    ADD COLUMN lane TINYINT AS (CRC32(ordering_key) & 15) VIRTUAL;

-- One lease per lane: the relay that owns it, the fencing epoch (raised by
-- each takeover), and when the lease ends unless its owner renews it.
-- Heartbeats update these rows; claims only read them (a plain consistent
-- read), so a heartbeat never waits for a claim.
CREATE TABLE IF NOT EXISTS {{name "lanes"}} (
    lane       TINYINT      NOT NULL PRIMARY KEY,
    owner      VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    epoch      BIGINT       NOT NULL DEFAULT 0,
    expires_at DATETIME(6)  NOT NULL DEFAULT '1970-01-01 00:00:00'
) ENGINE = InnoDB;

INSERT IGNORE INTO {{name "lanes"}} (lane)
VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15);

-- The fence: one row per lane that a claim transaction reads with a shared
-- lock (LOCK IN SHARE MODE) for as long as it lives, and that a relay
-- taking a lane over must lock exclusively (FOR UPDATE SKIP LOCKED, in a
-- transaction of its own) before it claims from the lane. MySQL's GET_LOCK
-- is session-scoped, so a row lock plays PostgreSQL's transaction-scoped
-- advisory lock. It is a table apart from the leases so that renewing a
-- lease never waits for the claims that share-lock its lane.
CREATE TABLE IF NOT EXISTS {{name "fences"}} (
    lane TINYINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

INSERT IGNORE INTO {{name "fences"}} (lane)
VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15);

-- The relays that take part, each renewing its row with its leases: their
-- number sets each relay's share of the lanes.
CREATE TABLE IF NOT EXISTS {{name "relays"}} (
    relay      VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    expires_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB;
