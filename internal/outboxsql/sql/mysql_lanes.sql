-- Lanes on MySQL 8 / MariaDB 10.6 or later (docs/design/lanes.md, the
-- baseline migration 001_create_outbox). {{table}} is the outbox table, {{name "lanes"}} its lane
-- leases, {{name "fences"}} one lock row per lane and {{name "relays"}} the
-- relays that share the lanes. Durations are in microseconds, times UTC.
--
-- A claim transaction (READ COMMITTED) first reads its candidates, the
-- rows without a key and the claimable rows of the lanes it holds leases
-- of, without locks (lane_candidates). When some have a key, it then takes
-- a shared lock on the fence row of each of their lanes (fence_lock), then
-- reads which of those leases still hold (lane_valid) in a later statement,
-- so with a snapshot taken after the locks, and drops the keyed candidates
-- of the others. Then it locks the candidates by primary key (claim_lanes),
-- every condition checked again on their latest committed versions. A
-- relay that takes a lane over raises its epoch, then may
-- claim from it only once it can lock the lane's fence row exclusively
-- (lane_fence): every claim transaction of the previous owner has then
-- ended, and any later one sees the new epoch. Heartbeats update only the
-- lanes table, which claims never lock: they never wait for a claim.

-- name: fence_lock
-- The shared locks of the listed lanes, in lane order (a primary-key IN
-- list); held until the claim transaction ends.
SELECT lane FROM {{name "fences"}} WHERE lane IN ({{list "?"}}) ORDER BY lane LOCK IN SHARE MODE

-- name: lane_valid
-- Of the leases listed (lane, epoch), those the relay (the first ?) still
-- holds: a plain consistent read of the committed leases.
SELECT lane FROM {{name "lanes"}} WHERE owner = ? AND (lane, epoch) IN ({{list "(?,?)"}})

-- name: lane_candidates
-- The claim's first step, a plain consistent read (no locks): the rows of
-- claim in mysql.sql whose keys are of the listed lanes (the relay's
-- leases), or that have no key, each with its lane (NULL without a key).
-- A candidate only proposes an id: claim_lanes decides. A key's rows share a lane, so the
-- head-of-key check is unchanged. A locking scan would lock each row it
-- reads before the lane condition drops it, for a moment: the other
-- relays' claims would skip their own rows meanwhile. As in claim, two
-- scans of the pending index read due rows only (never scheduled nor
-- retried, in id order; and come due, earliest first), each up to the
-- limit, and the oldest of both are kept. Arguments: the scan's start,
-- the lanes, the limit; the same again; the limit.
SELECT c.id, c.lane FROM (
  (SELECT o.id, o.lane
   FROM {{table}} o
   WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at IS NULL AND o.id >= ?
     AND (o.ordering_key IS NULL OR o.lane IN ({{list "?"}}))
     AND (o.ordering_key IS NULL OR NOT EXISTS (
           SELECT 1 FROM {{table}} p
           WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id))
   ORDER BY o.id
   LIMIT ?)
  UNION ALL
  (SELECT o.id, o.lane
   FROM {{table}} o
   WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.next_attempt_at <= UTC_TIMESTAMP(6) AND o.id >= ?
     AND (o.ordering_key IS NULL OR o.lane IN ({{list "?"}}))
     AND (o.ordering_key IS NULL OR NOT EXISTS (
           SELECT 1 FROM {{table}} p
           WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id))
   ORDER BY o.next_attempt_at
   LIMIT ?)
) c
ORDER BY c.id
LIMIT ?

-- name: claim_lanes
-- The claim's last step: the listed candidates (those of lanes whose
-- leases lane_valid confirmed, and those without a key), by primary key, locked
-- unless another claim holds them, with every condition checked again on
-- their latest committed versions (a row delivered or no longer a head
-- meanwhile is dropped); the oldest ? of them, the batch. The candidates
-- include as many rows as the relay has in flight, which it skips; those
-- past the batch stay unlocked, for the claim that runs beside this one.
SELECT o.id, o.message_id, o.topic, COALESCE(o.ordering_key, ''), o.payload, o.headers, o.attempts, o.created_at
FROM {{table}} o
WHERE o.id IN ({{list "?"}})
  AND o.published_at IS NULL AND o.dead_at IS NULL
  AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= UTC_TIMESTAMP(6))
  AND (o.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM {{table}} p
        WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id))
ORDER BY o.id
LIMIT ?
FOR UPDATE SKIP LOCKED

-- name: lane_join
-- A relay's heartbeat: it is alive for ? µs more.
INSERT INTO {{name "relays"}} (relay, expires_at) VALUES (?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)

-- name: lane_count
-- How many relays are alive, the relay ? included.
SELECT 1 + COUNT(*) FROM {{name "relays"}} WHERE expires_at > UTC_TIMESTAMP(6) AND relay <> ?

-- name: lane_renew
-- Extends the leases the relay still owns by ? µs (lane_owned returns them).
UPDATE {{name "lanes"}} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE owner = ?

-- name: lane_owned
SELECT lane, epoch FROM {{name "lanes"}} WHERE owner = ?

-- name: lane_free
-- In acquire's READ COMMITTED transaction: up to ? lanes that nobody owns
-- or whose lease has ended, locked.
SELECT lane FROM {{name "lanes"}}
WHERE owner IS NULL OR expires_at < UTC_TIMESTAMP(6)
ORDER BY lane LIMIT ?
FOR UPDATE SKIP LOCKED

-- name: lane_take
-- Takes the listed lanes (lane_free's answer) for relay ? for ? µs,
-- raising their epochs.
UPDATE {{name "lanes"}}
SET owner = ?, epoch = epoch + 1, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE lane IN ({{list "?"}})

-- name: lane_taken
SELECT lane, epoch FROM {{name "lanes"}} WHERE lane IN ({{list "?"}})

-- name: lane_fence
-- In a transaction of its own: of the listed lanes, those whose fence row
-- no claim transaction holds now, locked exclusively until the commit that
-- follows at once.
SELECT lane FROM {{name "fences"}} WHERE lane IN ({{list "?"}}) ORDER BY lane FOR UPDATE SKIP LOCKED

-- name: lane_release
-- Gives the listed lanes of relay ? up.
UPDATE {{name "lanes"}} SET owner = NULL, expires_at = '1970-01-01 00:00:00'
WHERE owner = ? AND lane IN ({{list "?"}})

-- name: lane_leave
DELETE FROM {{name "relays"}} WHERE relay = ? OR expires_at < UTC_TIMESTAMP(6) - INTERVAL 1 HOUR
