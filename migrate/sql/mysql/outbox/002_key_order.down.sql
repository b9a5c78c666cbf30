DROP TRIGGER IF EXISTS {{ident "key_order"}};
DROP TABLE IF EXISTS {{name "keys"}};
