-- Queries of the outbox relay on MySQL 8 / MariaDB 10.6 or later. {{table}}
-- is the quoted outbox table. As on PostgreSQL, the relay claims rows with
-- FOR UPDATE SKIP LOCKED inside a transaction that it holds while it
-- publishes: another relay skips the locked rows, and a relay that dies
-- releases them with its connection. The marks commit in that same
-- transaction. Times are UTC (UTC_TIMESTAMP(6)); durations are passed in
-- microseconds, so the session's time zone never matters. {{list "?"}}
-- becomes one placeholder per id: a primary-key IN list, so an UPDATE locks only
-- the rows it names (an IN (subquery) may be run as a scan that locks every
-- row it reads, including other relays' claimed rows).

-- name: claim
-- A keyed row is claimable only at the head of its key: no earlier row of
-- the key is undelivered (dead ones included, so a dead row parks its key,
-- and locked ones included, so one message per key is in flight). The
-- subquery is a plain consistent read: FOR UPDATE locks only the outer rows.
-- The first ? is the scan's start (see Store.Claim); the key check looks
-- below it too. Two scans of the pending index read due rows only: the
-- rows never scheduled nor retried (next_attempt_at NULL) in id order, and
-- those whose time has come, earliest first; a row scheduled ahead is in
-- neither. Each takes up to the limit (the second ?); the oldest of both
-- are returned, and rows locked past the limit stay locked until the batch
-- ends. Arguments: start, limit, start, limit, limit.
(SELECT o.id, o.message_id, o.topic, COALESCE(o.ordering_key, ''), o.payload, o.headers, o.attempts, o.created_at
 FROM {{table}} o
 WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at IS NULL AND o.id >= ?
   AND (o.ordering_key IS NULL OR NOT EXISTS (
         SELECT 1 FROM {{table}} p
         WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id))
 ORDER BY o.id
 LIMIT ?
 FOR UPDATE SKIP LOCKED)
UNION ALL
(SELECT o.id, o.message_id, o.topic, COALESCE(o.ordering_key, ''), o.payload, o.headers, o.attempts, o.created_at
 FROM {{table}} o
 WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at <= UTC_TIMESTAMP(6) AND o.id >= ?
   AND (o.ordering_key IS NULL OR NOT EXISTS (
         SELECT 1 FROM {{table}} p
         WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id))
 ORDER BY o.next_attempt_at
 LIMIT ?
 FOR UPDATE SKIP LOCKED)
ORDER BY 1
LIMIT ?

-- name: mark_published
UPDATE {{table}} SET published_at = UTC_TIMESTAMP(6)
WHERE id IN ({{list "?"}})

-- name: delete_published
DELETE FROM {{table}} WHERE id IN ({{list "?"}})

-- MySQL evaluates SET assignments left to right, each seeing the ones
-- before it: dead_at is computed before attempts is incremented.
-- Arguments: max attempts, error, retry delay (µs), id.
-- name: reject
UPDATE {{table}}
SET dead_at = CASE WHEN attempts + 1 >= ? THEN UTC_TIMESTAMP(6) END,
    last_error = ?,
    next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
    attempts = attempts + 1
WHERE id = ?

-- Arguments: age (µs), limit. Every relay runs the cleanup: it locks the
-- rows it will delete, skipping those a cleanup beside it holds, in a READ
-- COMMITTED transaction, then deletes them by id (delete_published), so
-- that concurrent cleanups share the work instead of waiting for each
-- other; a DELETE cannot skip locked rows.
-- name: cleanup
SELECT id FROM {{table}}
WHERE published_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY published_at
LIMIT ?
FOR UPDATE SKIP LOCKED

-- name: counts
SELECT
  (SELECT COUNT(*) FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT COUNT(*) FROM {{table}} WHERE dead_at IS NOT NULL),
  (SELECT COUNT(*) FROM {{table}} o WHERE o.published_at IS NULL AND o.dead_at IS NULL
     AND o.ordering_key IN (SELECT d.ordering_key FROM {{table}} d WHERE d.dead_at IS NOT NULL AND d.ordering_key IS NOT NULL)),
  COALESCE((SELECT TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN attempts = 0 AND next_attempt_at > created_at THEN next_attempt_at ELSE created_at END),
              UTC_TIMESTAMP(6)) / 1000000.0
            FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL
              AND (next_attempt_at IS NULL OR attempts > 0 OR next_attempt_at <= UTC_TIMESTAMP(6))), 0)

-- name: backlog
-- The relay's periodic sample (Relay.Sample) and inspect.Backlog: the
-- undelivered rows by disjoint state (pending, retrying, parked), the dead
-- count, the age of the oldest claimable row (due, not parked), the keys
-- that dead rows park and the age of the oldest undelivered row that is not
-- dead, in one statement. A row is parked when a dead row shares its key.
-- The dead rows are read once. A scheduled row (never attempted, its
-- next_attempt_at ahead of its created_at: Message.DeliverAt) counts in
-- the ages from its due time, and not at all before it; the last column
-- counts the pending rows that are scheduled and not yet due.
WITH dead AS (SELECT ordering_key FROM {{table}} WHERE dead_at IS NOT NULL)
SELECT
  CAST(COALESCE(SUM(CASE WHEN k.ordering_key IS NULL AND o.attempts = 0 THEN 1 ELSE 0 END), 0) AS SIGNED),
  CAST(COALESCE(SUM(CASE WHEN k.ordering_key IS NULL AND o.attempts > 0 THEN 1 ELSE 0 END), 0) AS SIGNED),
  CAST(COALESCE(SUM(CASE WHEN k.ordering_key IS NOT NULL THEN 1 ELSE 0 END), 0) AS SIGNED),
  (SELECT COUNT(*) FROM dead),
  COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN k.ordering_key IS NULL
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= UTC_TIMESTAMP(6)) THEN CASE WHEN o.attempts = 0 AND o.next_attempt_at > o.created_at THEN o.next_attempt_at ELSE o.created_at END END), UTC_TIMESTAMP(6)) / 1000000.0, 0),
  (SELECT COUNT(DISTINCT ordering_key) FROM dead),
  COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN o.next_attempt_at IS NULL OR o.attempts > 0
      OR o.next_attempt_at <= UTC_TIMESTAMP(6) THEN CASE WHEN o.attempts = 0 AND o.next_attempt_at > o.created_at THEN o.next_attempt_at ELSE o.created_at END END), UTC_TIMESTAMP(6)) / 1000000.0, 0),
  CAST(COALESCE(SUM(CASE WHEN k.ordering_key IS NULL AND o.attempts = 0 AND o.next_attempt_at > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END), 0) AS SIGNED)
FROM {{table}} o
LEFT JOIN (SELECT DISTINCT ordering_key FROM dead WHERE ordering_key IS NOT NULL) k
  ON k.ordering_key = o.ordering_key
WHERE o.published_at IS NULL AND o.dead_at IS NULL

-- name: backlog_topics
-- inspect.Backlog's topics: the undelivered rows (dead ones included) and
-- the dead rows of the ? topics with the most undelivered rows.
SELECT topic, COUNT(*), CAST(COALESCE(SUM(CASE WHEN dead_at IS NOT NULL THEN 1 ELSE 0 END), 0) AS SIGNED)
FROM {{table}} WHERE published_at IS NULL
GROUP BY topic ORDER BY COUNT(*) DESC, topic LIMIT ?

-- name: list_dead
SELECT id, message_id, topic, COALESCE(ordering_key, ''), attempts, COALESCE(last_error, ''), created_at, dead_at,
  (SELECT COUNT(*) FROM {{table}} p WHERE p.ordering_key = d.ordering_key AND p.published_at IS NULL AND p.dead_at IS NULL AND p.id > d.id)
FROM {{table}} d WHERE dead_at IS NOT NULL ORDER BY id LIMIT ?

-- name: list_dead_brief
-- list_dead with the text columns cut to their first {{clip}} characters,
-- and their full lengths in bytes: what a page listing many rows reads.
SELECT id, LEFT(message_id, {{clip}}), LEFT(topic, {{clip}}), LEFT(COALESCE(ordering_key, ''), {{clip}}), attempts,
  LEFT(COALESCE(last_error, ''), {{clip}}), created_at, dead_at,
  (SELECT COUNT(*) FROM {{table}} p WHERE p.ordering_key = d.ordering_key AND p.published_at IS NULL AND p.dead_at IS NULL AND p.id > d.id),
  LENGTH(message_id), LENGTH(topic), COALESCE(LENGTH(ordering_key), 0), COALESCE(LENGTH(last_error), 0)
FROM {{table}} d WHERE dead_at IS NOT NULL ORDER BY id LIMIT ?

-- name: list_pending
-- The undelivered rows (dead ones included) that the executor (a pool or
-- the caller's transaction) sees, oldest first, with their delivery state
-- (parked: a dead row shares the key of this row, which is not dead).
-- txboxtest's assertions read every row; inspect.Pending and inspect.Show
-- filter them. Arguments (see mysql.listPending): a seq twice (0: any), a
-- topic twice and a key twice ('': any), the least attempts, whether dead
-- rows are included, the limit.
SELECT o.id, o.message_id, o.topic, COALESCE(o.ordering_key, ''), o.payload, o.headers, o.created_at,
  o.attempts, o.next_attempt_at, COALESCE(o.last_error, ''), o.dead_at,
  o.dead_at IS NULL AND o.ordering_key IS NOT NULL AND EXISTS (
    SELECT 1 FROM {{table}} d WHERE d.ordering_key = o.ordering_key AND d.dead_at IS NOT NULL)
FROM {{table}} o
WHERE o.published_at IS NULL AND (? = 0 OR o.id = ?)
  AND (? = '' OR o.topic = ?) AND (? = '' OR o.ordering_key = ?)
  AND o.attempts >= ? AND (? OR o.dead_at IS NULL)
ORDER BY o.id
LIMIT ?

-- name: redrive
UPDATE {{table}} SET dead_at = NULL, attempts = 0, next_attempt_at = NULL
WHERE dead_at IS NOT NULL AND id IN ({{list "?"}})

-- name: redrive_all
UPDATE {{table}} SET dead_at = NULL, attempts = 0, next_attempt_at = NULL WHERE dead_at IS NOT NULL

-- name: discard
DELETE FROM {{table}} WHERE dead_at IS NOT NULL AND id IN ({{list "?"}})

-- name: discard_all
DELETE FROM {{table}} WHERE dead_at IS NOT NULL

-- name: dead_ids
-- The dead rows a bulk action tries one by one when the statement on all
-- of them failed (Store.Redrive, Store.Discard).
SELECT id FROM {{table}} WHERE dead_at IS NOT NULL ORDER BY id

-- name: insert
-- Outbox.Add's multi-row INSERT: {{list}} repeats one row's values, up to
-- 1000 rows (see Inserter.Insert).
INSERT INTO {{table}} (message_id, topic, ordering_key, payload, headers) VALUES {{list "(?,?,?,?,?)"}}

-- name: lock_keys
-- Before a multi-row insert, the key-order locks of its rows' keys, one
-- placeholder per distinct key, in bucket order (see Inserter.lockKeys and
-- txboxmigrate/sql/mysql/outbox/002_key_order.sql).
SELECT bucket FROM {{name "keys"}} WHERE bucket IN ({{list "CRC32(?) & 4095"}}) ORDER BY bucket FOR UPDATE

-- The claim transaction's READ COMMITTED for a txboxdriver.Pool that cannot
-- begin a transaction at a level (see mysql.beginClaim): SET TRANSACTION is
-- refused inside a transaction, so the empty one just begun is committed,
-- the level set for the next one, and that one started on the same
-- connection.
-- name: read_committed_end_empty
COMMIT

-- name: read_committed_set
SET TRANSACTION ISOLATION LEVEL READ COMMITTED

-- name: read_committed_start
START TRANSACTION

-- name: insert_at
-- insert with next_attempt_at, the time a scheduled row is due
-- (Message.DeliverAt) in UTC: the statement of a chunk that holds one.
INSERT INTO {{table}} (message_id, topic, ordering_key, payload, headers, next_attempt_at) VALUES {{list "(?,?,?,?,?,?)"}}

-- name: cancel_find
-- Outbox.Cancel: the rows still to deliver (not dead) with the message id,
-- read without locks; the delete that follows names them by primary key,
-- so that it locks those rows only (a DELETE by message id would lock
-- every pending row it scans, and under REPEATABLE READ the gaps too).
SELECT id FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL AND message_id = ? ORDER BY id

-- name: cancel
-- Outbox.Cancel's delete. A row a relay holds is waited for; if the relay
-- published it meanwhile, the condition no longer holds and it stays.
DELETE FROM {{table}} WHERE id IN ({{list "?"}}) AND published_at IS NULL AND dead_at IS NULL

-- name: cancel_state
-- Outbox.Cancel, when nothing was discarded: the rows with the message id
-- that were published (and the last publish time) or are dead, and those
-- a relay holds (none here: a claim is a row lock, waited for). It reads
-- the whole table (message_id has no index).
SELECT COALESCE(SUM(published_at IS NOT NULL), 0), MAX(published_at),
       COALESCE(SUM(published_at IS NULL AND dead_at IS NOT NULL), 0), 0
FROM {{table}} WHERE message_id = ?
