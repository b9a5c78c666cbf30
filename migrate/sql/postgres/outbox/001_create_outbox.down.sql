-- Drops the outbox table, its indexes and every row in it. Migrator.Down
-- refuses while the table holds undelivered rows, unless forced.
DROP TABLE IF EXISTS {{table}};
