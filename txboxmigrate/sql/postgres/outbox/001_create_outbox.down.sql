-- Drops the outbox table, its indexes, triggers and every row in it, and
-- the tables and functions beside it. Migrator.Down refuses while the
-- table holds undelivered rows, unless forced.
DROP TABLE IF EXISTS {{table}};
DROP FUNCTION IF EXISTS {{name "key_order"}}();
DROP FUNCTION IF EXISTS {{name "notify"}}();
DROP TABLE IF EXISTS {{name "wake"}};
DROP TABLE IF EXISTS {{name "relays"}};
DROP TABLE IF EXISTS {{name "lanes"}};
