-- The rules of 003_contract, in one statement (see the up migration).
-- Rows the up migration parked dead stay dead, and keys it made NULL stay
-- NULL.
ALTER TABLE {{table}}
    DROP CONSTRAINT {{ident "topic_chars"}},
    ADD CONSTRAINT {{ident "topic_chars"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR topic NOT REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(32 USING utf8mb4), CHAR(127 USING utf8mb4), CHAR(0xC2A0 USING utf8mb4), CHAR(0xE280A8 USING utf8mb4), CHAR(0xE280A9 USING utf8mb4), ']')),
    DROP CONSTRAINT {{ident "ordering_key_length"}},
    ADD CONSTRAINT {{ident "ordering_key_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR ordering_key IS NULL OR LENGTH(ordering_key) <= 256);
