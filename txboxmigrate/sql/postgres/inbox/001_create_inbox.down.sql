-- Drops the inbox table and its receipts. Migrator.Down refuses while it
-- holds any, unless forced: without them a redelivered message is handled
-- again.
DROP TABLE IF EXISTS {{table}};
