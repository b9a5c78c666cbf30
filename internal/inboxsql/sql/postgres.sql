-- Queries of the inbox on PostgreSQL. {{table}} is the quoted,
-- schema-qualified inbox table (see txboxmigrate/sql/postgres/inbox).
--
-- The receipt is insert-first: under READ COMMITTED, a second transaction
-- inserting the same key waits for the first one's uncommitted row, then
-- either sees the conflict (the first committed: no row returned, a
-- duplicate) or inserts (the first rolled back: one row returned, fresh).

-- name: receive
INSERT INTO {{table}} (source, message_id, received_at, metadata)
VALUES ($1, $2, now(), $3)
ON CONFLICT (source, message_id) DO NOTHING
RETURNING 1

-- Handle's receipt: the row is written already processed, because it only
-- becomes visible if the transaction commits, and Handle commits only after
-- the handler returned nil. It saves the UPDATE of mark_processed.
-- name: receive_processed
INSERT INTO {{table}} (source, message_id, received_at, processed_at, metadata)
VALUES ($1, $2, now(), now(), $3)
ON CONFLICT (source, message_id) DO NOTHING
RETURNING 1

-- name: mark_processed
UPDATE {{table}} SET processed_at = coalesce(processed_at, now())
WHERE source = $1 AND message_id = $2

-- name: exists
SELECT 1 FROM {{table}} WHERE source = $1 AND message_id = $2

-- name: stats
SELECT source, count(*), count(processed_at)
FROM {{table}}
GROUP BY source
ORDER BY source

-- $1: cutoff for processed rows, $2: cutoff for unprocessed rows (older),
-- $4: the only source swept ('': every source).
-- Concurrent sweeps take disjoint rows (SKIP LOCKED), and a sweep never
-- waits for a row that a handler's transaction holds. The DELETE finds the
-- rows it locked by their physical address (ctid, a TID scan; the lock
-- keeps them where they are until it commits): written as (source,
-- message_id) IN (subquery), it was planned, as the statistics fell,
-- either as a hash join over a scan of the whole table for each batch (31
-- ms against 1.1 ms per 1,000 receipts of a 200,000-row table) or as a
-- nested loop of primary-key probes, still slower (100 batches of 1,000 of
-- a 1,000,000-row table: 325 ms, against 140 and 123 ms).
-- name: sweep
DELETE FROM {{table}}
WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM {{table}}
  WHERE received_at < $1 AND (processed_at IS NOT NULL OR received_at < $2)
    AND ($4::text = '' OR source = $4)
  LIMIT $3
  FOR UPDATE SKIP LOCKED))

-- Sweep's dry run (inbox.SweepOptions.DryRun): how many rows sweep would
-- delete, with its arguments but the limit.
-- name: sweep_count
SELECT count(*) FROM {{table}}
WHERE received_at < $1 AND (processed_at IS NOT NULL OR received_at < $2)
  AND ($3::text = '' OR source = $3)

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
-- processed as in receive_processed: RETURNING names the fresh ones. The
-- rows come sorted by key, so that two batches lock them in one order.
-- name: receive_many
INSERT INTO {{table}} (source, message_id, received_at, processed_at, metadata)
VALUES {{list "(?, ?, now(), now(), ?)"}}
ON CONFLICT (source, message_id) DO NOTHING
RETURNING source, message_id

-- A receipt of receive_many whose handler failed (after the rollback to
-- its savepoint, which came after the receipt).
-- name: forget
DELETE FROM {{table}} WHERE source = $1 AND message_id = $2
