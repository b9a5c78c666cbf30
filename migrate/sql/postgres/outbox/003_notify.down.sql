DROP TRIGGER IF EXISTS {{ident "notify"}} ON {{table}};
DROP FUNCTION IF EXISTS {{name "notify"}}();
DROP TABLE IF EXISTS {{name "wake"}};
