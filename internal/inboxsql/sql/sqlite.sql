-- Queries of the inbox on SQLite (3.35 or later, for RETURNING). {{table}}
-- is the quoted inbox table (see txboxmigrate/sql/sqlite/inbox). Times are unix
-- microseconds, passed in by the caller.
--
-- The receipt is insert-first with ON CONFLICT on the primary key only,
-- rather than INSERT OR IGNORE, which would also swallow NOT NULL and CHECK
-- failures and report them as duplicates. RETURNING answers fresh or
-- duplicate in the same statement (no changes() call that another statement
-- on the connection could disturb). SQLite has one writer at a time, so two
-- copies of a message are serialised; open the database with
-- _txlock=immediate so that writers queue on BEGIN.

-- name: receive
INSERT INTO {{table}} (source, message_id, received_at, metadata)
VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (source, message_id) DO NOTHING
RETURNING 1

-- Handle's receipt, written already processed: see postgres.sql.
-- name: receive_processed
INSERT INTO {{table}} (source, message_id, received_at, processed_at, metadata)
VALUES (?1, ?2, ?3, ?3, ?4)
ON CONFLICT (source, message_id) DO NOTHING
RETURNING 1

-- name: mark_processed
UPDATE {{table}} SET processed_at = coalesce(processed_at, ?3)
WHERE source = ?1 AND message_id = ?2

-- name: exists
SELECT 1 FROM {{table}} WHERE source = ?1 AND message_id = ?2

-- name: stats
SELECT source, count(*), count(processed_at)
FROM {{table}}
GROUP BY source
ORDER BY source

-- ?1: cutoff for processed rows, ?2: cutoff for unprocessed rows (older).
-- name: sweep
DELETE FROM {{table}}
WHERE rowid IN (
  SELECT rowid FROM {{table}}
  WHERE received_at < ?1 AND (processed_at IS NOT NULL OR received_at < ?2)
    AND (?4 = '' OR source = ?4)
  LIMIT ?3)

-- Sweep's dry run (inbox.SweepOptions.DryRun): how many rows sweep would
-- delete, with its arguments but the limit.
-- name: sweep_count
SELECT count(*) FROM {{table}}
WHERE received_at < ?1 AND (processed_at IS NOT NULL OR received_at < ?2)
  AND (?3 = '' OR source = ?3)

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

-- The receipts of a batch in one statement (HandleBatch), already
-- processed as in receive_processed: RETURNING names the fresh ones.
-- name: receive_many
INSERT INTO {{table}} (source, message_id, received_at, processed_at, metadata)
VALUES {{list "(?, ?, ?, ?, ?)"}}
ON CONFLICT (source, message_id) DO NOTHING
RETURNING source, message_id

-- A receipt of receive_many whose handler failed (after the rollback to
-- its savepoint, which came after the receipt).
-- name: forget
DELETE FROM {{table}} WHERE source = ?1 AND message_id = ?2
