-- Lanes on PostgreSQL (docs/design/relay.md). {{table}} is the outbox table,
-- {{name "lanes"}} its lane leases and {{name "relays"}} the relays that
-- share them. Durations are in milliseconds.
--
-- A claim transaction first takes a shared transaction-scoped advisory
-- lock (class: the table's OID) on each lane it will read (lane_lock or
-- lane_lock_active), and names those lanes in the transaction's setting
-- txbox.lanes; then it reads those lanes, and no other, with their owner
-- and epoch checked against the table in a later statement, so with a
-- snapshot taken after the locks (lane_claim). A relay that takes a lane over
-- raises its epoch, then may claim from it only once an exclusive lock on
-- it can be had (fence): every claim transaction of the lane's previous
-- owner has then ended (committed its marks, rolled back, or been ended by
-- the server with its session), and any later one sees the new epoch.

-- name: lane_lock
-- The claim transaction's first statement: its idle timeout and plan
-- settings ($1, as claim_timeout in postgres.sql) and the shared locks of
-- the lanes $2. The lock class is the outbox table's OID: unique in the
-- database (advisory locks are per database), whatever the schema. Sorts
-- are off so that the generic plan reads a lane from the lane index, in
-- order, whatever the statistics said when it was made (the key index and
-- a sort of all the keyed rows would do as well on an empty table).
SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_indexonlyscan', 'off', true), set_config('jit', 'off', true), set_config('enable_sort', 'off', true),
       set_config('txbox.lanes', coalesce((SELECT array_agg(x.l)::text FROM (
         SELECT l, pg_advisory_xact_lock_shared('{{table}}'::regclass::oid::int, l) FROM unnest($2::int[]) l) x), '{}'), true)

-- name: lane_lock_active
-- lane_lock of the lanes of $2 that have undelivered keyed rows (dead ones
-- included) in this statement's snapshot, found by a loose scan of the
-- lane index: one index probe per lane with rows, and one more. A lane
-- whose first row commits after this snapshot is not read by this claim;
-- its commit wakes the relay (or its poll comes), and the next claim finds
-- it and reads it from its first undelivered row, as every read does.
WITH RECURSIVE a(lane) AS (
  SELECT min(hashtext(o.ordering_key) & 63) FROM {{table}} o
  WHERE o.ordering_key IS NOT NULL AND o.published_at IS NULL
  UNION ALL
  SELECT (SELECT min(hashtext(o.ordering_key) & 63) FROM {{table}} o
          WHERE (hashtext(o.ordering_key) & 63) > a.lane AND o.ordering_key IS NOT NULL AND o.published_at IS NULL)
  FROM a WHERE a.lane IS NOT NULL)
SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_indexonlyscan', 'off', true), set_config('jit', 'off', true), set_config('enable_sort', 'off', true),
       set_config('txbox.lanes', coalesce((SELECT array_agg(x.l)::text FROM (
         SELECT l, pg_advisory_xact_lock_shared('{{table}}'::regclass::oid::int, l)
         FROM unnest($2::int[]) l WHERE l IN (SELECT a.lane FROM a WHERE a.lane IS NOT NULL)) x), '{}'), true)

-- name: lane_claim
-- The claim, in the claim transaction after lane_lock, in one statement.
-- Up to $6 rows without a key due at once (next_attempt_at NULL), oldest
-- first from id $8 on (u, index unkeyed_ready), and up to $6 whose time
-- has come, earliest first, wherever their ids (d, index unkeyed_due),
-- claimed FOR UPDATE SKIP LOCKED (any relay claims those): neither read
-- meets a row not yet due, however many are scheduled ahead, and with no
-- row due d reads nothing. The pick takes the oldest of them; the rest
-- stay locked until the batch ends. And the owner's read of its
-- keyed rows: the lanes of $1 this transaction locked (txbox.lanes, read
-- and parsed once, in a subquery, not once per lane of $1) whose epoch is
-- still the one in $2 and whose
-- owner is still $4, in the order given, each read from its first
-- undelivered row (dead ones included) in id order from the lane index, at
-- most $3 rows of each and $7 in all, less the rows of the keys $5 (keys
-- the relay knows are parked or retrying later; it does not read a lane
-- with keys in flight in another batch of its own), each row locked as it
-- is read, FOR UPDATE NOWAIT: only a lane's owner locks its rows, so a row
-- held by another transaction (someone locked an outbox row by hand, or
-- two relays own one lane: a fencing failure) fails the statement (SQLSTATE
-- 55P03), and the relay claims again with lane_claim_checked, which tells
-- that row from the rest and stops its key there. A row updated since the
-- statement's snapshot is followed to its latest version and rechecked
-- (still undelivered), as any FOR UPDATE. One pass: each keyed row is read
-- and locked by the same index scan, where a read then a lock by ctid
-- visits each row twice and joins the two. The relay picks what to publish
-- in Go (outboxsql.Lanes.Claim). Empty headers come back NULL: nothing for
-- the relay to copy or decode; lane is -1 for a row without a key, due the
-- epoch for a row with no retry set; the last column (locked) is true.
{{template "_lane_claim" false}}

-- name: lane_claim_checked
-- lane_claim, but each keyed row read is then locked FOR UPDATE SKIP
-- LOCKED, by the ctid read (a TID scan: no index probe; a row updated since
-- is followed to its latest version and rechecked), still undelivered;
-- locked says which were. A row read but not locked is held by another
-- transaction (someone locked an outbox row by hand, or two relays own one
-- lane: a fencing failure): the relay's pick stops its key there, so the
-- key is never published out of order, and the rest of the lane and every
-- other lane flow. The relay runs it after lane_claim failed on such a row
-- (SQLSTATE 55P03), and instead of lane_claim for a while after
-- (outboxsql.Lanes.Claim). The arguments and columns are lane_claim's.
{{template "_lane_claim" true}}

-- name: _lane_claim
-- lane_claim, and with true lane_claim_checked.
WITH u AS (
  SELECT o.id, o.message_id, o.topic, o.payload, nullif(o.headers, '{}')::text AS headers, o.attempts, o.created_at
  FROM {{table}} o
  WHERE o.ordering_key IS NULL AND o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at IS NULL AND o.id >= $8
  ORDER BY o.id
  LIMIT $6
  FOR UPDATE OF o SKIP LOCKED),
d AS (
  SELECT o.id, o.message_id, o.topic, o.payload, nullif(o.headers, '{}')::text AS headers, o.attempts, o.created_at
  FROM {{table}} o
  WHERE o.ordering_key IS NULL AND o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at <= now()
  ORDER BY o.next_attempt_at
  LIMIT $6
  FOR UPDATE OF o SKIP LOCKED),
v AS MATERIALIZED (
  SELECT w.lane, w.ord
  FROM unnest($1::smallint[], $2::bigint[]) WITH ORDINALITY w(lane, epoch, ord)
  JOIN {{name "lanes"}} l ON l.lane = w.lane AND l.epoch = w.epoch AND l.owner = $4
  WHERE w.lane = ANY((SELECT current_setting('txbox.lanes')::smallint[])::smallint[])
  ORDER BY w.ord),
k AS MATERIALIZED (
  SELECT r.* FROM v CROSS JOIN LATERAL (
    SELECT o.id,{{if .}} o.ctid,{{end}} o.ordering_key, o.dead_at IS NOT NULL AS dead, o.next_attempt_at > now() AS later, o.next_attempt_at AS due, v.lane,
           o.message_id, o.topic, o.payload, nullif(o.headers, '{}')::text AS headers, o.attempts, o.created_at
    FROM {{table}} o
    WHERE (hashtext(o.ordering_key) & 63) = v.lane::int AND o.ordering_key IS NOT NULL AND o.published_at IS NULL
      AND o.ordering_key <> ALL($5::text[])
    ORDER BY (hashtext(o.ordering_key) & 63), o.id
    LIMIT $3
    {{- if not .}}
    FOR UPDATE OF o NOWAIT{{end}}) r
  LIMIT $7){{if .}},
x AS MATERIALIZED (
  SELECT o.id FROM {{table}} o
  WHERE o.ctid = ANY(ARRAY(SELECT k.ctid FROM k)) AND o.published_at IS NULL
  FOR UPDATE OF o SKIP LOCKED){{end}}
SELECT k.id, k.message_id, k.topic, k.ordering_key, k.payload, k.headers, k.attempts, k.created_at,
       k.lane, k.dead, coalesce(k.later, false), coalesce(k.due, 'epoch'), {{if .}}x.id IS NOT NULL
FROM k LEFT JOIN x ON x.id = k.id{{else}}true
FROM k{{end}}
UNION ALL
SELECT u.id, u.message_id, u.topic, '', u.payload, u.headers, u.attempts, u.created_at, -1::smallint, false, false, 'epoch', true
FROM u
UNION ALL
SELECT d.id, d.message_id, d.topic, '', d.payload, d.headers, d.attempts, d.created_at, -1::smallint, false, false, 'epoch', true
FROM d

-- name: claim_unkeyed
-- The claim of a relay that reads no lane this time (lanesToRead: a
-- backlog of rows without a key), after lane_lock of no lane: lane_claim's
-- rows without a key (u and d, $1 of each, u from id $2), in its columns.
WITH u AS (
  SELECT o.id, o.message_id, o.topic, o.payload, nullif(o.headers, '{}')::text AS headers, o.attempts, o.created_at
  FROM {{table}} o
  WHERE o.ordering_key IS NULL AND o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at IS NULL AND o.id >= $2
  ORDER BY o.id
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED),
d AS (
  SELECT o.id, o.message_id, o.topic, o.payload, nullif(o.headers, '{}')::text AS headers, o.attempts, o.created_at
  FROM {{table}} o
  WHERE o.ordering_key IS NULL AND o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at <= now()
  ORDER BY o.next_attempt_at
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED)
SELECT u.id, u.message_id, u.topic, '', u.payload, u.headers, u.attempts, u.created_at, -1::smallint, false, false, 'epoch'::timestamptz, true
FROM u
UNION ALL
SELECT d.id, d.message_id, d.topic, '', d.payload, d.headers, d.attempts, d.created_at, -1::smallint, false, false, 'epoch'::timestamptz, true
FROM d

-- name: lane_join
-- A relay's heartbeat: it is alive for $2 more, and says how many relays
-- are (itself included). The CTE runs whether or not it is read.
WITH me AS (
  INSERT INTO {{name "relays"}} (relay, expires_at) VALUES ($1, now() + $2 * interval '1 millisecond')
  ON CONFLICT (relay) DO UPDATE SET expires_at = excluded.expires_at
  RETURNING relay
)
SELECT 1 + count(*) FROM {{name "relays"}} r WHERE r.expires_at > now() AND r.relay <> $1

-- name: lane_renew
-- Extends the leases the relay $1 still owns by $2 and returns them with
-- their epochs: a lane missing from the answer was taken over.
UPDATE {{name "lanes"}} SET expires_at = now() + $2 * interval '1 millisecond'
WHERE owner = $1
RETURNING lane, epoch

-- name: lane_acquire
-- Takes up to $3 lanes that nobody owns or whose lease has ended, raising
-- their epochs.
UPDATE {{name "lanes"}} l
SET owner = $1, epoch = l.epoch + 1, expires_at = now() + $2 * interval '1 millisecond'
WHERE l.lane IN (
  SELECT f.lane FROM {{name "lanes"}} f
  WHERE f.owner IS NULL OR f.expires_at < now()
  ORDER BY f.lane LIMIT $3
  FOR UPDATE SKIP LOCKED)
RETURNING l.lane, l.epoch

-- name: lane_fence
-- The lanes of $1 that no claim transaction holds now: an exclusive lock
-- on each, released at once (the statement is its own transaction).
SELECT l FROM unnest($1::int[]) l WHERE pg_try_advisory_xact_lock('{{table}}'::regclass::oid::int, l)

-- name: lane_release
-- Gives the lanes $2 of relay $1 up (rebalancing, or all of them at stop).
UPDATE {{name "lanes"}} SET owner = NULL, expires_at = '-infinity'
WHERE owner = $1 AND lane = ANY($2::smallint[])

-- name: lane_leave
DELETE FROM {{name "relays"}} WHERE relay = $1 OR expires_at < now() - interval '1 hour'
