-- The rules of 004_contract. Rows the up migration parked dead stay dead,
-- and keys it made NULL stay NULL.
ALTER TABLE {{table}}
    DROP CONSTRAINT IF EXISTS {{ident "topic_chars"}},
    ADD CONSTRAINT {{ident "topic_chars"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR topic !~ '[\x01-\x20\x7f\u00a0\u2028\u2029]') NOT VALID,
    DROP CONSTRAINT IF EXISTS {{ident "ordering_key_length"}},
    ADD CONSTRAINT {{ident "ordering_key_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR octet_length(ordering_key) <= 256) NOT VALID;
