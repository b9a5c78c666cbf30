-- Queries of the outbox relay on SQLite. {{table}} is the quoted outbox table.
-- SQLite has one writer at a time, so the relay must not hold a write
-- transaction while it waits on the broker: it claims rows with a lease
-- (claim_token, claimed_until: unix microseconds) in one short UPDATE, and
-- marks them only where its token still holds. A relay that dies leaves its
-- lease to expire; another relay then claims the rows again.

-- name: claim
-- A keyed row is claimable only at the head of its key: no earlier row of
-- the key is undelivered (dead or leased ones included). ?4 is the scan's
-- start (see Store.Claim); the key check looks below it too. Two scans of
-- the pending index read due rows only: the rows never scheduled nor
-- retried (next_attempt_at NULL) in id order, and those whose time has
-- come, earliest first; a row scheduled ahead is in neither. Each takes up
-- to ?3 rows, and the oldest ?3 of both are leased. The time that judges
-- leases and retries, and stamps the new lease (?2 microseconds long), is
-- SQLite's clock when the statement runs, after any wait for the write
-- lock (up to busy_timeout): a time read before that wait would find a
-- lease that ran out meanwhile still held, and stamp a lease that much
-- shorter. A lease that is not an integer, or ends more than MaxClaimLease
-- (2 h, 7200000000 µs) from now, was not written by a relay: it counts as
-- expired. The clock is read as a scalar subquery, not joined: joined, it
-- costs the first scan its id order (a sort of every row due at once).
WITH clock(now) AS (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER))
UPDATE {{table}} SET claim_token = ?1, claimed_until = (SELECT now FROM clock) + ?2
WHERE id IN (
  SELECT id FROM (
    SELECT o.id FROM {{table}} o
    WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at IS NULL AND o.id >= ?4
      AND (o.claimed_until IS NULL OR o.claimed_until < (SELECT now FROM clock)
           OR typeof(o.claimed_until) <> 'integer' OR o.claimed_until > (SELECT now FROM clock) + 7200000000)
      AND (o.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM {{table}} p
            WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id))
    ORDER BY o.id
    LIMIT ?3)
  UNION ALL
  SELECT id FROM (
    SELECT o.id FROM {{table}} o
    WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at <= (SELECT now FROM clock) AND o.id >= ?4
      AND (o.claimed_until IS NULL OR o.claimed_until < (SELECT now FROM clock)
           OR typeof(o.claimed_until) <> 'integer' OR o.claimed_until > (SELECT now FROM clock) + 7200000000)
      AND (o.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM {{table}} p
            WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id))
    ORDER BY o.next_attempt_at
    LIMIT ?3)
  ORDER BY 1
  LIMIT ?3)
RETURNING id, message_id, topic, coalesce(ordering_key, ''), payload, headers, attempts, created_at

-- name: mark_published
UPDATE {{table}} SET published_at = ?1, claim_token = NULL, claimed_until = NULL
WHERE claim_token = ?2 AND id IN (SELECT value FROM json_each(?3))

-- name: delete_published
-- The lease token fences the delete as it does the mark.
DELETE FROM {{table}}
WHERE claim_token = ?1 AND id IN (SELECT value FROM json_each(?2))

-- name: reject
UPDATE {{table}}
SET attempts = attempts + 1,
    last_error = ?2,
    next_attempt_at = ?3,
    dead_at = CASE WHEN attempts + 1 >= ?4 THEN ?5 END,
    claim_token = NULL, claimed_until = NULL
WHERE id = ?1 AND claim_token = ?6

-- name: release
-- Ends the lease ?1 on every row that holds it: after a claim that failed
-- (its rows unknown). It reads the whole table (no index has
-- claim_token); the ends of a claim that returned its rows name them
-- (release_seqs).
UPDATE {{table}} SET claim_token = NULL, claimed_until = NULL WHERE claim_token = ?1

-- name: release_seqs
-- Ends the lease ?1 on the rows ?2 (a JSON array of ids): the claimed
-- rows a batch neither marked nor rejected. It reads those rows only, by
-- id, however many rows the table holds.
UPDATE {{table}} SET claim_token = NULL, claimed_until = NULL
WHERE claim_token = ?1 AND id IN (SELECT value FROM json_each(?2))

-- name: cleanup
DELETE FROM {{table}}
WHERE id IN (SELECT id FROM {{table}} WHERE published_at < ?1 LIMIT ?2)

-- name: counts
SELECT
  (SELECT count(*) FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT count(*) FROM {{table}} WHERE dead_at IS NOT NULL),
  (SELECT count(*) FROM {{table}} o WHERE o.published_at IS NULL AND o.dead_at IS NULL
     AND o.ordering_key IN (SELECT d.ordering_key FROM {{table}} d WHERE d.dead_at IS NOT NULL AND d.ordering_key IS NOT NULL)),
  coalesce((SELECT (?1 - min(CASE WHEN attempts = 0 AND next_attempt_at > created_at THEN next_attempt_at ELSE created_at END)) / 1e6
            FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL
              AND (next_attempt_at IS NULL OR attempts > 0 OR next_attempt_at <= ?1)), 0)

-- name: backlog
-- The relay's periodic sample (Relay.Sample) and inspect.Backlog: the
-- undelivered rows by disjoint state (pending, retrying, parked), the dead
-- count, the age of the oldest claimable row (due, not parked), the keys
-- that dead rows park and the age of the oldest undelivered row that is not
-- dead, in one statement. A row is parked when a dead row shares its key.
-- The dead rows are read once. ?1 is now, in unix microseconds. A
-- scheduled row (never attempted, its next_attempt_at ahead of its
-- created_at: Message.DeliverAt) counts in the ages from its due time, and
-- not at all before it. The last column counts the pending rows that are
-- scheduled and not yet due.
WITH dead AS (SELECT ordering_key FROM {{table}} WHERE dead_at IS NOT NULL)
SELECT
  coalesce(sum(CASE WHEN k.ordering_key IS NULL AND o.attempts = 0 THEN 1 ELSE 0 END), 0),
  coalesce(sum(CASE WHEN k.ordering_key IS NULL AND o.attempts > 0 THEN 1 ELSE 0 END), 0),
  coalesce(sum(CASE WHEN k.ordering_key IS NOT NULL THEN 1 ELSE 0 END), 0),
  (SELECT count(*) FROM dead),
  coalesce((?1 - min(CASE WHEN k.ordering_key IS NULL
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= ?1) THEN CASE WHEN o.attempts = 0 AND o.next_attempt_at > o.created_at THEN o.next_attempt_at ELSE o.created_at END END)) / 1e6, 0),
  (SELECT count(DISTINCT ordering_key) FROM dead),
  coalesce((?1 - min(CASE WHEN o.next_attempt_at IS NULL OR o.attempts > 0
      OR o.next_attempt_at <= ?1 THEN CASE WHEN o.attempts = 0 AND o.next_attempt_at > o.created_at THEN o.next_attempt_at ELSE o.created_at END END)) / 1e6, 0),
  coalesce(sum(CASE WHEN k.ordering_key IS NULL AND o.attempts = 0 AND o.next_attempt_at > ?1 THEN 1 ELSE 0 END), 0)
FROM {{table}} o
LEFT JOIN (SELECT DISTINCT ordering_key FROM dead WHERE ordering_key IS NOT NULL) k
  ON k.ordering_key = o.ordering_key
WHERE o.published_at IS NULL AND o.dead_at IS NULL

-- name: backlog_topics
-- inspect.Backlog's topics: the undelivered rows (dead ones included) and
-- the dead rows of the ?1 topics with the most undelivered rows.
SELECT topic, count(*), count(dead_at)
FROM {{table}} WHERE published_at IS NULL
GROUP BY topic ORDER BY count(*) DESC, topic LIMIT ?1

-- name: list_dead
SELECT id, message_id, topic, coalesce(ordering_key, ''), attempts, coalesce(last_error, ''), created_at, dead_at,
  (SELECT count(*) FROM {{table}} p WHERE p.ordering_key = d.ordering_key AND p.published_at IS NULL AND p.dead_at IS NULL AND p.id > d.id)
FROM {{table}} d WHERE dead_at IS NOT NULL ORDER BY id LIMIT ?1

-- name: list_dead_brief
-- list_dead with the text columns cut to their first {{clip}} characters,
-- and their full lengths in bytes: what a page listing many rows reads.
SELECT id, substr(message_id, 1, {{clip}}), substr(topic, 1, {{clip}}), substr(coalesce(ordering_key, ''), 1, {{clip}}), attempts,
  substr(coalesce(last_error, ''), 1, {{clip}}), created_at, dead_at,
  (SELECT count(*) FROM {{table}} p WHERE p.ordering_key = d.ordering_key AND p.published_at IS NULL AND p.dead_at IS NULL AND p.id > d.id),
  length(CAST(message_id AS BLOB)), length(CAST(topic AS BLOB)), coalesce(length(CAST(ordering_key AS BLOB)), 0), coalesce(length(CAST(last_error AS BLOB)), 0)
FROM {{table}} d WHERE dead_at IS NOT NULL ORDER BY id LIMIT ?1

-- name: list_pending
-- The undelivered rows (dead ones included) that the executor (a pool or
-- the caller's transaction) sees, oldest first, with their delivery state
-- (parked: a dead row shares the key of this row, which is not dead).
-- txboxtest's assertions read every row; inspect.Pending and inspect.Show
-- filter them: ?1 a seq (0: any), ?2 a topic and ?3 a key ('': any), ?4
-- the least attempts, ?5 whether dead rows are included, ?6 the limit.
SELECT o.id, o.message_id, o.topic, coalesce(o.ordering_key, ''), o.payload, o.headers, o.created_at,
  o.attempts, o.next_attempt_at, coalesce(o.last_error, ''), o.dead_at,
  o.dead_at IS NULL AND o.ordering_key IS NOT NULL AND EXISTS (
    SELECT 1 FROM {{table}} d WHERE d.ordering_key = o.ordering_key AND d.dead_at IS NOT NULL)
FROM {{table}} o
WHERE o.published_at IS NULL AND (?1 = 0 OR o.id = ?1)
  AND (?2 = '' OR o.topic = ?2) AND (?3 = '' OR o.ordering_key = ?3)
  AND o.attempts >= ?4 AND (?5 OR o.dead_at IS NULL)
ORDER BY o.id
LIMIT ?6

-- name: redrive
UPDATE {{table}} SET dead_at = NULL, attempts = 0, next_attempt_at = NULL
WHERE dead_at IS NOT NULL AND id IN (SELECT value FROM json_each(?1))

-- name: redrive_all
UPDATE {{table}} SET dead_at = NULL, attempts = 0, next_attempt_at = NULL WHERE dead_at IS NOT NULL

-- name: discard
DELETE FROM {{table}} WHERE dead_at IS NOT NULL AND id IN (SELECT value FROM json_each(?1))

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

-- name: insert_at
-- insert with next_attempt_at, the time a scheduled row is due
-- (Message.DeliverAt) in Unix microseconds: the statement of a chunk that
-- holds one.
INSERT INTO {{table}} (message_id, topic, ordering_key, payload, headers, next_attempt_at) VALUES {{list "(?,?,?,?,?,?)"}}

-- name: cancel_find
-- Outbox.Cancel: the rows still to deliver (not dead) with the message id
-- ?1.
SELECT id FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL AND message_id = ?1 ORDER BY id

-- name: cancel
-- Outbox.Cancel's delete, of the rows no relay holds: a row under a live
-- lease (judged as the claim judges it) is being published, and stays.
WITH clock(now) AS (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER))
DELETE FROM {{table}}
WHERE id IN (SELECT value FROM json_each(?1)) AND published_at IS NULL AND dead_at IS NULL
  AND (claimed_until IS NULL OR claimed_until < (SELECT now FROM clock)
       OR typeof(claimed_until) <> 'integer' OR claimed_until > (SELECT now FROM clock) + 7200000000)

-- name: cancel_state
-- Outbox.Cancel, when nothing was discarded: the rows with the message id
-- ?1 that were published (and the last publish time), are dead, or are
-- held by a relay's live lease. It reads the whole table (message_id has
-- no index).
WITH clock(now) AS (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER))
SELECT coalesce(sum(published_at IS NOT NULL), 0), max(published_at),
       coalesce(sum(published_at IS NULL AND dead_at IS NOT NULL), 0),
       coalesce(sum(published_at IS NULL AND dead_at IS NULL AND typeof(claimed_until) = 'integer'
           AND claimed_until >= (SELECT now FROM clock) AND claimed_until <= (SELECT now FROM clock) + 7200000000), 0)
FROM {{table}} WHERE message_id = ?1
