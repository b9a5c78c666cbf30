-- Queries of the outbox relay on PostgreSQL. {{table}} is the quoted,
-- schema-qualified outbox table. The relay claims rows with FOR UPDATE SKIP
-- LOCKED inside a transaction that it holds while it publishes: another relay
-- skips the locked rows, and a relay that dies releases them with its
-- connection, or, if its side of the connection vanished unseen, when the
-- server ends the idle transaction (see claim_timeout). The marks commit in
-- that same transaction.

-- name: claim
-- Store.Claim: up to $1 rows from id $2 on, oldest first. A keyed row is
-- claimable only at the head of its key: no earlier row of the key is
-- undelivered (dead ones included, so a dead row parks its key, and locked
-- ones included, so one message per key is in flight). The head is read as
-- the first entry of the key's index. The relay claims with lane_claim
-- (postgres_lanes.sql) instead; this is the claim of one caller
-- that owns no lanes. Empty headers come back NULL.
SELECT o.id, o.message_id, o.topic, coalesce(o.ordering_key, ''), o.payload, nullif(o.headers, '{}')::text, o.attempts, o.created_at
FROM {{table}} o
WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= $2
  AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
  AND (o.ordering_key IS NULL OR o.id <= (
        SELECT p.id FROM {{table}} p
        WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL
        ORDER BY p.ordering_key, p.id LIMIT 1))
ORDER BY o.id
LIMIT $1
FOR UPDATE OF o SKIP LOCKED

-- name: claim_timeout
-- Run first in each claim transaction, with the claim lease in ms: the
-- server ends the transaction (and the session) when the relay leaves it
-- idle longer, so that a relay whose connection vanished holds no row lock
-- much past PublishTimeout. Local to the transaction: the pooled
-- connection keeps its own setting for the application's transactions.
-- The claim that follows runs a generic plan: its custom plans (which a
-- prepared claim otherwise gets on every execution, the LIMIT being a
-- parameter) have the same shape, an index scan of the pending rows by id,
-- and planning it cost more than running it. Index-only scans are off:
-- the head-of-key probe reads the key's index, whose entries of delivered
-- rows stay until VACUUM; a plain index scan marks each one dead as it
-- steps over it (the next probe skips it), an index-only scan does not
-- (PostgreSQL 15) and fetches every one from the table on every probe.
-- JIT is off: the generic plan's cost grows with the table (it cannot know
-- the LIMIT), and past jit_above_cost (100,000 by default, a backlog of
-- about 150,000 rows) every claim compiled its plan with LLVM, tens of
-- milliseconds for a claim that runs in one: a relay catching up on a
-- 400,000-row backlog drained at a sixth of its rate.
SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_indexonlyscan', 'off', true), set_config('jit', 'off', true)

-- name: mark_published
UPDATE {{table}} SET published_at = now() WHERE id = ANY($1)

-- name: delete_published
-- Relay.Config.DeletePublished: the mark is a delete, in the same
-- transaction, so nothing is left for cleanup.
DELETE FROM {{table}} WHERE id = ANY($1)

-- name: lazy_commit
-- Run before committing the marks of a batch: the commit returns before
-- its WAL reaches the disk. A database crash in the next few hundred
-- milliseconds can undo those marks, and the rows are published again: a
-- duplicate, never a loss. What a crash undoes is always every commit after
-- some point of the WAL, so a key's undone marks are its last ones: the key
-- is published again from its first undone row, in order, as after a relay
-- that died before its marks (docs/reference/guarantees.md).
SET LOCAL synchronous_commit TO OFF

-- name: mark_published_lazy
-- mark_published and lazy_commit in one statement (one round trip fewer):
-- the set_config is a one-time filter, run once before the scan.
UPDATE {{table}} SET published_at = now()
WHERE id = ANY($1) AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL

-- name: delete_published_lazy
-- delete_published and lazy_commit in one statement.
DELETE FROM {{table}}
WHERE id = ANY($1) AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL

-- name: reject
UPDATE {{table}}
SET attempts = attempts + 1,
    last_error = $2,
    next_attempt_at = now() + $3 * interval '1 millisecond',
    dead_at = CASE WHEN attempts + 1 >= $4 THEN now() END
WHERE id = $1

-- name: cleanup
-- Every relay runs the cleanup: concurrent ones take disjoint rows (SKIP
-- LOCKED) instead of waiting for each other's, or deadlocking on rows each
-- locked in another order. The ids go to the DELETE as an array, read by
-- primary key: written as id IN (subquery), the DELETE was planned, as the
-- statistics fell, either as a hash join over a scan of the whole table
-- for each batch (30 ms against 1.7 ms per 1,000 rows of a 200,000-row
-- table) or as a nested loop, still slower (100 batches of 1,000 of a
-- 1,000,000-row table: 313 ms, against 228 and 265 ms).
DELETE FROM {{table}}
WHERE id = ANY(ARRAY(SELECT id FROM {{table}} WHERE published_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED))

-- name: counts
-- The pending and dead counts, the rows parked, and the age of the oldest
-- pending row; a scheduled row (see backlog) from its due time.
SELECT
  (SELECT count(*) FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT count(*) FROM {{table}} WHERE dead_at IS NOT NULL),
  (SELECT count(*) FROM {{table}} o WHERE o.published_at IS NULL AND o.dead_at IS NULL
     AND o.ordering_key IN (SELECT d.ordering_key FROM {{table}} d WHERE d.dead_at IS NOT NULL AND d.ordering_key IS NOT NULL)),
  coalesce((SELECT extract(epoch FROM now() - min(CASE WHEN attempts = 0 AND next_attempt_at > created_at THEN next_attempt_at ELSE created_at END))::float8
            FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL
              AND (next_attempt_at IS NULL OR attempts > 0 OR next_attempt_at <= now())), 0)

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
  count(*) FILTER (WHERE k.ordering_key IS NULL AND o.attempts = 0),
  count(*) FILTER (WHERE k.ordering_key IS NULL AND o.attempts > 0),
  count(*) FILTER (WHERE k.ordering_key IS NOT NULL),
  (SELECT count(*) FROM dead),
  coalesce(extract(epoch FROM now() - min(CASE WHEN o.attempts = 0 AND o.next_attempt_at > o.created_at THEN o.next_attempt_at ELSE o.created_at END) FILTER (
    WHERE k.ordering_key IS NULL AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())))::float8, 0),
  (SELECT count(DISTINCT ordering_key) FROM dead),
  coalesce(extract(epoch FROM now() - min(CASE WHEN o.attempts = 0 AND o.next_attempt_at > o.created_at THEN o.next_attempt_at ELSE o.created_at END) FILTER (
    WHERE o.next_attempt_at IS NULL OR o.attempts > 0 OR o.next_attempt_at <= now()))::float8, 0),
  count(*) FILTER (WHERE k.ordering_key IS NULL AND o.attempts = 0 AND o.next_attempt_at > now())
FROM {{table}} o
LEFT JOIN (SELECT DISTINCT ordering_key FROM dead WHERE ordering_key IS NOT NULL) k
  ON k.ordering_key = o.ordering_key
WHERE o.published_at IS NULL AND o.dead_at IS NULL

-- name: backlog_topics
-- inspect.Backlog's topics: the undelivered rows (dead ones included) and
-- the dead rows of the $1 topics with the most undelivered rows.
SELECT topic, count(*), count(*) FILTER (WHERE dead_at IS NOT NULL)
FROM {{table}} WHERE published_at IS NULL
GROUP BY topic ORDER BY count(*) DESC, topic LIMIT $1

-- name: list_dead
SELECT id, message_id, topic, coalesce(ordering_key, ''), attempts, coalesce(last_error, ''), created_at, dead_at,
  (SELECT count(*) FROM {{table}} p WHERE p.ordering_key = d.ordering_key AND p.published_at IS NULL AND p.dead_at IS NULL AND p.id > d.id)
FROM {{table}} d WHERE dead_at IS NOT NULL ORDER BY id LIMIT $1

-- name: list_dead_brief
-- list_dead with the text columns cut to their first {{clip}} characters,
-- and their full lengths in bytes: what a page listing many rows reads.
SELECT id, left(message_id, {{clip}}), left(topic, {{clip}}), left(coalesce(ordering_key, ''), {{clip}}), attempts,
  left(coalesce(last_error, ''), {{clip}}), created_at, dead_at,
  (SELECT count(*) FROM {{table}} p WHERE p.ordering_key = d.ordering_key AND p.published_at IS NULL AND p.dead_at IS NULL AND p.id > d.id),
  octet_length(message_id), octet_length(topic), coalesce(octet_length(ordering_key), 0), coalesce(octet_length(last_error), 0)
FROM {{table}} d WHERE dead_at IS NOT NULL ORDER BY id LIMIT $1

-- name: list_pending
-- The undelivered rows (dead ones included) that the executor (a pool or
-- the caller's transaction) sees, oldest first, with their delivery state
-- (parked: a dead row shares the key of this row, which is not dead).
-- txboxtest's assertions read every row; inspect.Pending and inspect.Show
-- filter them: $1 a seq (0: any), $2 a topic and $3 a key ('': any), $4
-- the least attempts, $5 whether dead rows are included, $6 the limit.
SELECT o.id, o.message_id, o.topic, coalesce(o.ordering_key, ''), o.payload, o.headers::text, o.created_at,
  o.attempts, o.next_attempt_at, coalesce(o.last_error, ''), o.dead_at,
  o.dead_at IS NULL AND o.ordering_key IS NOT NULL AND EXISTS (
    SELECT 1 FROM {{table}} d WHERE d.ordering_key = o.ordering_key AND d.dead_at IS NOT NULL)
FROM {{table}} o
WHERE o.published_at IS NULL AND ($1::bigint = 0 OR o.id = $1)
  AND ($2::text = '' OR o.topic = $2) AND ($3::text = '' OR o.ordering_key = $3)
  AND o.attempts >= $4 AND ($5::boolean OR o.dead_at IS NULL)
ORDER BY o.id
LIMIT $6

-- name: redrive
UPDATE {{table}} SET dead_at = NULL, attempts = 0, next_attempt_at = NULL
WHERE dead_at IS NOT NULL AND id = ANY($1)

-- name: redrive_all
UPDATE {{table}} SET dead_at = NULL, attempts = 0, next_attempt_at = NULL WHERE dead_at IS NOT NULL

-- name: discard
DELETE FROM {{table}} WHERE dead_at IS NOT NULL AND id = ANY($1)

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

-- name: table_health
-- The table's upkeep (Store.Health), in one statement: its size with
-- indexes and TOAST, its indexes' size, the statistics collector's
-- estimates of live and dead row versions, the seconds since its last
-- VACUUM, manual or auto (NULL: never); then what holds the database's
-- horizon back (h), this session excepted: each session's snapshot, each
-- prepared transaction, each replication slot with an xmin. VACUUM keeps
-- every row version deleted or updated after the oldest of them, so that
-- while a transaction stays open every delivered row's index entry stays
-- too and the relay's claims step over them all (docs/guide/operations.md).
-- From h: the seconds since the oldest transaction began (slots have
-- none: NULL, which max passes over; NULL with no transaction), and the
-- holder furthest back (NULLs when none). The statistics are read with the
-- functions behind pg_stat_user_tables: the view reads every table of the
-- database to return one.
WITH h AS (
    SELECT 'transaction' AS kind,
           a.pid::text || coalesce(' (' || nullif(a.application_name, '') || ')', '') AS holder,
           coalesce(a.state, '') AS state,
           extract(epoch FROM now() - a.xact_start)::float8 AS seconds,
           age(a.backend_xmin)::bigint AS xmin_age
    FROM pg_stat_activity a
    WHERE a.datname = current_database() AND a.backend_xmin IS NOT NULL AND a.pid <> pg_backend_pid()
    UNION ALL
    SELECT 'prepared transaction', p.gid, '', extract(epoch FROM now() - p.prepared)::float8, age(p.transaction)::bigint
    FROM pg_prepared_xacts p WHERE p.database = current_database()
    UNION ALL
    SELECT 'replication slot', r.slot_name, CASE WHEN r.active THEN 'active' ELSE 'inactive' END, NULL, age(r.xmin)::bigint
    FROM pg_replication_slots r WHERE r.xmin IS NOT NULL AND (r.database IS NULL OR r.database = current_database())
), top AS (
    SELECT * FROM h ORDER BY xmin_age DESC LIMIT 1
)
SELECT pg_total_relation_size(t.oid), pg_indexes_size(t.oid),
       pg_stat_get_live_tuples(t.oid), pg_stat_get_dead_tuples(t.oid),
       extract(epoch FROM now() - greatest(pg_stat_get_last_vacuum_time(t.oid), pg_stat_get_last_autovacuum_time(t.oid)))::float8,
       (SELECT max(h.seconds) FROM h),
       top.kind, top.holder, top.state, top.seconds, top.xmin_age
FROM (SELECT '{{table}}'::regclass::oid AS oid) t LEFT JOIN top ON true

-- name: insert_at
-- insert with next_attempt_at, the time a scheduled row is due
-- (Message.DeliverAt): the statement of a chunk that holds one.
INSERT INTO {{table}} (message_id, topic, ordering_key, payload, headers, next_attempt_at) VALUES {{list "(?,?,?,?,?,?)"}}

-- name: cancel_find
-- Outbox.Cancel: the rows still to deliver (not dead) with the message id
-- $1, read from the pending index; the delete that follows names them by
-- primary key, so that it locks those rows only.
SELECT id FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL AND message_id = $1 ORDER BY id

-- name: cancel
-- Outbox.Cancel's delete. A row a relay holds is waited for; if the relay
-- published it meanwhile, the condition no longer holds and it stays.
DELETE FROM {{table}} WHERE id = ANY($1) AND published_at IS NULL AND dead_at IS NULL

-- name: cancel_state
-- Outbox.Cancel, when nothing was discarded: the rows with the message id
-- $1 that were published (and the last publish time) or are dead, and
-- those a relay holds (none here: a claim is a row lock, waited for). It
-- reads the whole table (message_id has no index): a cancel that finds
-- nothing to discard is the rare case.
SELECT count(*) FILTER (WHERE published_at IS NOT NULL), max(published_at),
       count(*) FILTER (WHERE published_at IS NULL AND dead_at IS NOT NULL), 0::bigint
FROM {{table}} WHERE message_id = $1
