-- Per-key order = commit order (see docs/ordering.md). A row's id is drawn
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
