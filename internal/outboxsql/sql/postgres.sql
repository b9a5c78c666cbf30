-- Queries of the outbox relay on PostgreSQL. {{table}} is the quoted,
-- schema-qualified outbox table. The relay claims rows with FOR UPDATE SKIP
-- LOCKED inside a transaction that it holds while it publishes: another relay
-- skips the locked rows, and a relay that dies releases them with its
-- connection. The marks commit in that same transaction.

-- name: claim
SELECT id, message_id, topic, coalesce(ordering_key, ''), payload, headers::text, attempts, created_at
FROM {{table}}
WHERE published_at IS NULL AND dead_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED

-- name: mark_published
UPDATE {{table}} SET published_at = now() WHERE id = ANY($1)

-- name: reject
UPDATE {{table}}
SET attempts = attempts + 1,
    last_error = $2,
    next_attempt_at = now() + $3 * interval '1 millisecond',
    dead_at = CASE WHEN attempts + 1 >= $4 THEN now() END
WHERE id = $1

-- name: cleanup
DELETE FROM {{table}}
WHERE id IN (SELECT id FROM {{table}} WHERE published_at < $1 LIMIT $2)

-- name: counts
SELECT
  (SELECT count(*) FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT count(*) FROM {{table}} WHERE dead_at IS NOT NULL),
  coalesce((SELECT extract(epoch FROM now() - min(created_at))::float8 FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL), 0)
