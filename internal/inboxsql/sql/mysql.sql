-- Queries of the inbox on MySQL 8 / MariaDB. {{table}} is the quoted inbox
-- table (see txboxmigrate/sql/mysql/inbox). Times are UTC; durations are passed
-- in microseconds, so the session's time zone never matters.
--
-- The receipt is insert-first: a second transaction inserting the same key
-- waits for the first one's uncommitted row, then either finds the
-- duplicate (the first committed) or inserts (the first rolled back).
--
-- Fresh or duplicate, without a RETURNING clause (MySQL has none) and
-- without being fooled by affected-rows quirks: INSERT IGNORE is not used,
-- because it also turns truncation, NOT NULL and CHECK failures into
-- warnings and would report them as duplicates. ON DUPLICATE KEY UPDATE
-- reports 1 for an inserted row, 2 for an updated row, and for a row "set to
-- its current values" 0 — or 1 when the client sets CLIENT_FOUND_ROWS
-- (go-sql-driver/mysql's clientFoundRows=true), the same as an insert. So
-- the duplicate path always changes the row (duplicates = duplicates + 1):
-- 1 means fresh and 2 means duplicate under either setting, and any other
-- answer is an error, never a guess.

-- name: receive
INSERT INTO {{table}} (source, message_id, received_at, metadata)
VALUES (?, ?, UTC_TIMESTAMP(6), ?)
ON DUPLICATE KEY UPDATE duplicates = duplicates + 1

-- Handle's receipt, written already processed: see postgres.sql.
-- name: receive_processed
INSERT INTO {{table}} (source, message_id, received_at, processed_at, metadata)
VALUES (?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), ?)
ON DUPLICATE KEY UPDATE duplicates = duplicates + 1

-- Affected rows is 0 for a row already processed unless CLIENT_FOUND_ROWS
-- is set: when it reports 0, found_receipt (a locking read, which sees the
-- latest committed row as the UPDATE did) tells "already processed" from
-- "never received".
-- name: mark_processed
UPDATE {{table}} SET processed_at = COALESCE(processed_at, UTC_TIMESTAMP(6))
WHERE source = ? AND message_id = ?

-- name: found_receipt
SELECT 1 FROM {{table}} WHERE source = ? AND message_id = ? LOCK IN SHARE MODE

-- name: exists
SELECT 1 FROM {{table}} WHERE source = ? AND message_id = ?

-- name: stats
SELECT CAST(source AS CHAR CHARACTER SET utf8mb4), COUNT(*), COUNT(processed_at)
FROM {{table}}
GROUP BY source
ORDER BY source

-- Arguments: processed rows' age (µs), unprocessed rows' age (µs, larger),
-- the source twice, limit. Sweep locks the receipts it will delete,
-- skipping those a sweep beside it (or a handler) holds, then deletes them
-- by key (sweep_delete): a DELETE cannot skip locked rows.
-- name: sweep
SELECT source, message_id FROM {{table}}
WHERE received_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND (processed_at IS NOT NULL OR received_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)
  AND (? = '' OR source = ?)
ORDER BY received_at
LIMIT ?
FOR UPDATE SKIP LOCKED

-- Sweep's delete of the receipts it locked: "(source = ? AND message_id =
-- ?)" joined by OR follows, one per receipt.
-- name: sweep_delete
DELETE FROM {{table}} WHERE

-- Sweep's dry run (inbox.SweepOptions.DryRun): how many rows sweep would
-- delete, with its arguments but the limit.
-- name: sweep_count
SELECT COUNT(*) FROM {{table}}
WHERE received_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND (processed_at IS NOT NULL OR received_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)
  AND (? = '' OR source = ?)

-- The consumer's start-up check that the table is there and readable.
-- name: probe
SELECT source, message_id FROM {{table}} WHERE 1 = 0

-- HandleBatch runs each message of a batch under its own savepoint in one
-- transaction: a failed handler rolls back to it (its effects and its
-- receipt). Every message sets the same name again, without releasing the
-- previous one (which would cost a round trip): PostgreSQL and SQLite
-- stack same-named savepoints and roll back to the latest, MySQL replaces
-- the older one; COMMIT releases them all.
-- name: savepoint
SAVEPOINT txbox_inbox_item

-- name: rollback_savepoint
ROLLBACK TO SAVEPOINT txbox_inbox_item
