-- Two rules of the message contract (see docs/sql-contract.md) that
-- 003_contract left to the relay, now refused at INSERT:
--
-- An ordering_key of '' (<table>_ordering_key_length: NULL, or 1 to 256
-- bytes). The relay published such a row without a key; pending ones
-- become NULL here, which is how they go out.
--
-- Every white space in a topic that Go's unicode.IsSpace reports
-- (<table>_topic_chars): besides space and the control characters, U+0085,
-- U+00A0, U+1680, U+2000 to U+200A, U+2028, U+2029, U+202F, U+205F and
-- U+3000, spelled with CHAR() as in 003_contract. The relay parks such a
-- row dead; MySQL and MariaDB check every existing row when a CHECK is
-- added, so pending ones are parked here first, with "invalid row: …" in
-- last_error, as 003_contract parks rows.
--
-- Each ALTER drops a constraint and adds its new form in one statement:
-- either the old or the new rule holds, and an Up or Down interrupted
-- before its txbox_migrations row runs again as is. A row written between
-- the parking and the ALTER that breaks the new rule makes the ALTER fail;
-- run Up again.
UPDATE {{table}} SET ordering_key = NULL
WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key = '';

UPDATE {{table}}
SET dead_at = UTC_TIMESTAMP(6), last_error = 'invalid row: topic contains white space or a control character'
WHERE published_at IS NULL AND dead_at IS NULL
  AND topic REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(32 USING utf8mb4), CHAR(127 USING utf8mb4), CHAR(0xC285 USING utf8mb4), CHAR(0xC2A0 USING utf8mb4), CHAR(0xE19A80 USING utf8mb4), CHAR(0xE28080 USING utf8mb4), '-', CHAR(0xE2808A USING utf8mb4), CHAR(0xE280A8 USING utf8mb4), CHAR(0xE280A9 USING utf8mb4), CHAR(0xE280AF USING utf8mb4), CHAR(0xE2819F USING utf8mb4), CHAR(0xE38080 USING utf8mb4), ']');

ALTER TABLE {{table}}
    DROP CONSTRAINT {{ident "topic_chars"}},
    ADD CONSTRAINT {{ident "topic_chars"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR topic NOT REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(32 USING utf8mb4), CHAR(127 USING utf8mb4), CHAR(0xC285 USING utf8mb4), CHAR(0xC2A0 USING utf8mb4), CHAR(0xE19A80 USING utf8mb4), CHAR(0xE28080 USING utf8mb4), '-', CHAR(0xE2808A USING utf8mb4), CHAR(0xE280A8 USING utf8mb4), CHAR(0xE280A9 USING utf8mb4), CHAR(0xE280AF USING utf8mb4), CHAR(0xE2819F USING utf8mb4), CHAR(0xE38080 USING utf8mb4), ']')),
    DROP CONSTRAINT {{ident "ordering_key_length"}},
    ADD CONSTRAINT {{ident "ordering_key_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR ordering_key IS NULL OR LENGTH(ordering_key) BETWEEN 1 AND 256);
