-- Drops the release times (and their index with the column).
ALTER TABLE {{table}} DROP COLUMN IF EXISTS released_at;
