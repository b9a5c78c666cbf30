DROP TRIGGER IF EXISTS {{ident "key_order"}} ON {{table}};
DROP FUNCTION IF EXISTS {{name "key_order"}}();
