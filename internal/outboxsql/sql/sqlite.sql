-- Queries of the outbox relay on SQLite. {{table}} is the quoted outbox table.
-- SQLite has one writer at a time, so the relay must not hold a write
-- transaction while it waits on the broker: it claims rows with a lease
-- (claim_token, claimed_until: unix microseconds) in one short UPDATE, and
-- marks them only where its token still holds. A relay that dies leaves its
-- lease to expire; another relay then claims the rows again.

-- name: claim
UPDATE {{table}} SET claim_token = ?1, claimed_until = ?2
WHERE id IN (
  SELECT id FROM {{table}}
  WHERE published_at IS NULL AND dead_at IS NULL
    AND (next_attempt_at IS NULL OR next_attempt_at <= ?3)
    AND (claimed_until IS NULL OR claimed_until < ?3)
  ORDER BY id
  LIMIT ?4)
RETURNING id, message_id, topic, coalesce(ordering_key, ''), payload, headers, attempts, created_at

-- name: mark_published
UPDATE {{table}} SET published_at = ?1, claim_token = NULL, claimed_until = NULL
WHERE claim_token = ?2 AND id IN (SELECT value FROM json_each(?3))

-- name: reject
UPDATE {{table}}
SET attempts = attempts + 1,
    last_error = ?2,
    next_attempt_at = ?3,
    dead_at = CASE WHEN attempts + 1 >= ?4 THEN ?5 END,
    claim_token = NULL, claimed_until = NULL
WHERE id = ?1 AND claim_token = ?6

-- name: release
UPDATE {{table}} SET claim_token = NULL, claimed_until = NULL WHERE claim_token = ?1

-- name: cleanup
DELETE FROM {{table}}
WHERE id IN (SELECT id FROM {{table}} WHERE published_at < ?1 LIMIT ?2)

-- name: counts
SELECT
  (SELECT count(*) FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT count(*) FROM {{table}} WHERE dead_at IS NOT NULL),
  coalesce((SELECT (?1 - min(created_at)) / 1e6 FROM {{table}} WHERE published_at IS NULL AND dead_at IS NULL), 0)
