-- Drops the outbox table, its indexes and every row in it, and the tables
-- beside it. Migrator.Down refuses while the table holds undelivered rows,
-- unless forced.
DROP TABLE IF EXISTS {{name "relays"}};
DROP TABLE IF EXISTS {{name "fences"}};
DROP TABLE IF EXISTS {{name "lanes"}};
DROP TABLE IF EXISTS {{name "keys"}};
DROP TABLE IF EXISTS {{table}};
