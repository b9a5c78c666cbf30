-- Drops the release times; SQLite drops no column an index uses.
DROP INDEX IF EXISTS {{index "released"}};
ALTER TABLE {{table}} DROP COLUMN released_at;
