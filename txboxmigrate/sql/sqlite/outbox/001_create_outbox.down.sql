-- Drops the outbox table, its indexes, triggers and every row in it.
-- Migrator.Down refuses while the table holds undelivered rows, unless
-- forced.
DROP TABLE IF EXISTS {{table}};
