-- The outbox table on MySQL 8 / MariaDB 10.6 or later (SKIP LOCKED) and
-- everything the relay needs beside it, in one baseline. See
-- docs/reference/sql-contract.md and docs/design/relay.md. Times are UTC
-- (UTC_TIMESTAMP(6)), whatever the session's time zone. MySQL has no partial
-- indexes: the pending index leads with (published_at, dead_at), so the
-- relay's scan of "both NULL" reads only pending rows, then next_attempt_at,
-- so that the claim reads the rows due at once (NULL) in id order and the
-- ones scheduled or retried by due time, never a row whose time is ahead. MySQL DDL commits
-- implicitly, so every statement is written to be re-runnable (IF NOT
-- EXISTS): an Up interrupted between the DDL and its bookkeeping row simply
-- runs again.
--
-- The message contract is in the table: a plain-SQL writer that breaks a
-- rule the database can check gets an error at INSERT naming the rule's
-- constraint, <table>_<rule> (MySQL 3819, MariaDB 4025). In strict mode (the
-- default) a value longer than its column's 256 characters fails first with
-- "Data too long"; the constraints count bytes (LENGTH), which is what the
-- brokers limit. The rules bind rows still to deliver (published_at and
-- dead_at NULL): a published or dead row is history. Control characters
-- are U+0001 to U+001F and U+007F, as in Validate, spelled with CHAR():
-- backslash escapes would change meaning under NO_BACKSLASH_ESCAPES. Topics
-- also refuse every white space Validate refuses (Go's unicode.IsSpace:
-- space, U+0085, U+00A0, U+1680, U+2000 to U+200A, U+2028, U+2029, U+202F,
-- U+205F, U+3000). An ordering_key is NULL or 1 to 256 bytes: '' is
-- refused.
--
-- A keyed row belongs to one of 64 lanes, CRC32(ordering_key) & 63 (NULL
-- without a key), so all rows of a key share a lane. The lane column is
-- VIRTUAL: computed when a row is read.
CREATE TABLE IF NOT EXISTS {{table}} (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    message_id      VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT (UUID()),
    topic           VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    ordering_key    VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    payload         LONGBLOB     NOT NULL,
    headers         LONGTEXT     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT ('{}'),
    created_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    attempts        INT          NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(6)  NULL,
    last_error      TEXT         NULL,
    published_at    DATETIME(6)  NULL,
    dead_at         DATETIME(6)  NULL,
    lane            TINYINT AS (CRC32(ordering_key) & 63) VIRTUAL,
    CONSTRAINT {{ident "topic_check"}} CHECK (topic <> ''),
    INDEX {{index "pending"}} (published_at, dead_at, next_attempt_at, id),
    INDEX {{index "key"}} (ordering_key, published_at, id),
    CONSTRAINT {{ident "message_id_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR LENGTH(message_id) BETWEEN 1 AND 256),
    CONSTRAINT {{ident "message_id_control"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR message_id NOT REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(31 USING utf8mb4), CHAR(127 USING utf8mb4), ']')),
    CONSTRAINT {{ident "topic_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR LENGTH(topic) BETWEEN 1 AND 256),
    CONSTRAINT {{ident "topic_chars"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR topic NOT REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(32 USING utf8mb4), CHAR(127 USING utf8mb4), CHAR(0xC285 USING utf8mb4), CHAR(0xC2A0 USING utf8mb4), CHAR(0xE19A80 USING utf8mb4), CHAR(0xE28080 USING utf8mb4), '-', CHAR(0xE2808A USING utf8mb4), CHAR(0xE280A8 USING utf8mb4), CHAR(0xE280A9 USING utf8mb4), CHAR(0xE280AF USING utf8mb4), CHAR(0xE2819F USING utf8mb4), CHAR(0xE38080 USING utf8mb4), ']')),
    CONSTRAINT {{ident "ordering_key_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR ordering_key IS NULL OR LENGTH(ordering_key) BETWEEN 1 AND 256),
    CONSTRAINT {{ident "ordering_key_control"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR ordering_key IS NULL OR ordering_key NOT REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(31 USING utf8mb4), CHAR(127 USING utf8mb4), ']')),
    CONSTRAINT {{ident "headers_object"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR CASE WHEN JSON_VALID(headers) THEN JSON_TYPE(headers) = 'OBJECT' ELSE FALSE END)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Per-key order = commit order (see docs/guide/ordering.md). A row's id is drawn
-- from AUTO_INCREMENT when the row is written, not when its transaction
-- commits, so two transactions adding the same key could commit in the
-- other order than their ids. Before a keyed row is written, this trigger
-- takes a row lock (SELECT ... FOR UPDATE) on the key's bucket in
-- <table>_keys, held until the transaction ends: a second transaction
-- adding the same key waits until the first has committed or rolled back,
-- and only then is its id drawn (InnoDB assigns AUTO_INCREMENT after the
-- BEFORE INSERT trigger), so it is larger.
--
-- Why this mechanism: GET_LOCK is session-scoped, not transaction-scoped
-- (it would outlive the commit and leak into pooled connections); a lock
-- row per key inserted on demand takes gap locks under REPEATABLE READ that
-- make writers of different keys wait on each other and deadlock; a fixed
-- set of 4096 bucket rows locked by primary key takes record locks only.
-- Keys hashing to the same bucket (CRC32(key) & 4095) serialise their
-- writers, never the relay. Plain SQL writers get the same guarantee: it is
-- in the table. A multi-row INSERT reserves the ids of all its rows at its
-- first row, so a multi-row INSERT of keyed rows must lock their buckets
-- first (Outbox.Add does: SELECT ... WHERE bucket IN (...) FOR UPDATE, in
-- bucket order, which also keeps writers free of deadlocks).
CREATE TABLE IF NOT EXISTS {{name "keys"}} (
    bucket INT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

INSERT IGNORE INTO {{name "keys"}} (bucket)
SELECT a.n * 256 + b.n * 16 + c.n
FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) a
CROSS JOIN (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) b
CROSS JOIN (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) c;

-- txbox:begin
CREATE TRIGGER IF NOT EXISTS {{ident "key_order"}} BEFORE INSERT ON {{table}}
FOR EACH ROW
BEGIN
    DECLARE b INT DEFAULT NULL;
    IF NEW.ordering_key IS NOT NULL THEN
        SELECT bucket INTO b FROM {{name "keys"}}
        WHERE bucket = CRC32(NEW.ordering_key) & 4095 FOR UPDATE;
        IF b IS NULL THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'txbox: key-order lock row missing: run txbox migrate up';
        END IF;
    END IF;
END
-- txbox:end

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
VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15), (16), (17), (18), (19), (20), (21), (22), (23), (24), (25), (26), (27), (28), (29), (30), (31), (32), (33), (34), (35), (36), (37), (38), (39), (40), (41), (42), (43), (44), (45), (46), (47), (48), (49), (50), (51), (52), (53), (54), (55), (56), (57), (58), (59), (60), (61), (62), (63);

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
VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15), (16), (17), (18), (19), (20), (21), (22), (23), (24), (25), (26), (27), (28), (29), (30), (31), (32), (33), (34), (35), (36), (37), (38), (39), (40), (41), (42), (43), (44), (45), (46), (47), (48), (49), (50), (51), (52), (53), (54), (55), (56), (57), (58), (59), (60), (61), (62), (63);

-- The relays that take part, each renewing its row with its leases: their
-- number sets each relay's share of the lanes.
CREATE TABLE IF NOT EXISTS {{name "relays"}} (
    relay      VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    expires_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB;
