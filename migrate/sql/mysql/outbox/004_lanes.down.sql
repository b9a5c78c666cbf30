-- As in 003's down, a column already dropped is passed over (Migrator.Down).
DROP TABLE IF EXISTS {{name "relays"}};
DROP TABLE IF EXISTS {{name "fences"}};
DROP TABLE IF EXISTS {{name "lanes"}};
ALTER TABLE {{table}} DROP COLUMN lane;
