DROP TRIGGER IF EXISTS {{ident "lease_insert"}};
DROP TRIGGER IF EXISTS {{ident "lease_update"}};
DROP TRIGGER IF EXISTS {{ident "contract_redrive"}};
