-- Lanes on PostgreSQL (docs/scaling.md). {{table}} is the outbox table,
-- {{name "lanes"}} its lane leases and {{name "relays"}} the relays that
-- share them. Durations are in milliseconds.
--
-- A claim transaction first takes a shared transaction-scoped advisory
-- lock (class: the table's OID) on each lane it will read (lane_lock), then claims with the lanes'
-- owner and epoch checked against the table in a later statement, so with
-- a snapshot taken after the locks (claim). A relay that takes a lane over
-- raises its epoch, then may claim from it only once an exclusive lock on
-- it can be had (fence): every claim transaction of the lane's previous
-- owner has then ended (committed its marks, rolled back, or been ended by
-- the server with its session), and any later one sees the new epoch.

-- name: lane_lock
-- The claim transaction's first statement: its idle timeout and plan
-- settings ($1, as claim_timeout in postgres.sql) and the shared locks of
-- the lanes $2. The
-- lock class is the outbox table's OID: unique in the database (advisory
-- locks are per database), whatever the schema.
SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_indexonlyscan', 'off', true), set_config('jit', 'off', true),
       (SELECT count(*) FROM (SELECT pg_advisory_xact_lock_shared('{{table}}'::regclass::oid::int, l) FROM unnest($2::int[]) l) x)

-- name: claim_lanes
-- claim of postgres.sql, its keyed rows restricted to the lanes $3 whose
-- epochs are still $4 and whose owner is still $5. A key's rows share a
-- lane, so the head-of-key check is unchanged. Rows without a key are
-- claimed by any relay, as without lanes: they need no order, and reading
-- only owned lanes' rows would make each claim step over every other
-- relay's (the pending index is ordered by id, not by lane; see
-- docs/scaling.md). The scan reads a window of ids, as claim's does: $6
-- ids past the first pending row from $2 on, or past $7, at most ten
-- windows past that row; a short claim's last row of its own says where
-- pending rows go on past the window. Without it, a claim that found fewer
-- heads than a batch (a few keys, each with a long backlog behind its
-- head) read the whole backlog: 1.4 s per claim on 25,000 rows of 20 keys.
WITH e AS (
  SELECT least(greatest(f.id, $7) + $6, f.id + 10 * $6) AS id FROM (
    SELECT coalesce(min(w.id), $2) AS id FROM {{table}} w
    WHERE w.published_at IS NULL AND w.dead_at IS NULL AND w.id >= $2) f),
c AS (
SELECT o.id, o.message_id, o.topic, coalesce(o.ordering_key, ''), o.payload, o.headers::text, o.attempts, o.created_at
FROM {{table}} o
WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= $2 AND o.id < (SELECT e.id FROM e)
  AND (o.ordering_key IS NULL OR (hashtext(o.ordering_key) & 15)::smallint = ANY(ARRAY(
        SELECT l.lane FROM {{name "lanes"}} l
        JOIN unnest($3::smallint[], $4::bigint[]) w(lane, epoch) ON w.lane = l.lane AND w.epoch = l.epoch
        WHERE l.owner = $5)))
  AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
  AND (o.ordering_key IS NULL OR o.id <= (
        SELECT p.id FROM {{table}} p
        WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL
        ORDER BY p.ordering_key, p.id LIMIT 1))
ORDER BY o.id
LIMIT $1
FOR UPDATE OF o SKIP LOCKED)
SELECT c.*, NULL::bigint FROM c
UNION ALL
SELECT 0, '', '', '', ''::bytea, NULL, 0, now(), n.id
FROM (SELECT x.id FROM {{table}} x
      WHERE x.published_at IS NULL AND x.dead_at IS NULL AND x.id >= (SELECT e.id FROM e)
      ORDER BY x.id LIMIT 1) n
WHERE (SELECT count(*) FROM c) < $1

-- name: claim_lanes_runs
-- claim_runs of postgres.sql with the lanes of claim_lanes.
SELECT * FROM {{name "claim_runs"}}($1, $2, $3, $4, $5, $6, $7, $8, $9)

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
