-- Drops the claim check table and its payloads. Migrator.Down refuses while
-- it holds any, unless forced: a message that refers to one can then no
-- longer be resolved and is dead-lettered.
DROP TABLE IF EXISTS {{table}};
