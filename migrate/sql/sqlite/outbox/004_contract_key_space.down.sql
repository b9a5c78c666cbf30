-- The contract triggers of 002_contract and 003_lease, made again by those
-- migrations (003 makes its lease triggers again too). Keys the up
-- migration made NULL stay NULL.
DROP TRIGGER IF EXISTS {{ident "contract_insert"}};
DROP TRIGGER IF EXISTS {{ident "contract_update"}};
DROP TRIGGER IF EXISTS {{ident "contract_redrive"}};
DROP TRIGGER IF EXISTS {{ident "lease_insert"}};
DROP TRIGGER IF EXISTS {{ident "lease_update"}};
-- txbox:up 2
-- txbox:up 3
