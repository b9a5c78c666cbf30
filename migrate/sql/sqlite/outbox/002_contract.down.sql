-- Rows the up migration parked dead stay dead: `txbox dead redrive` sends
-- them again.
DROP TRIGGER IF EXISTS {{ident "contract_insert"}};
DROP TRIGGER IF EXISTS {{ident "contract_update"}};
