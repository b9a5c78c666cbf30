-- Two rules of the message contract (see docs/sql-contract.md) that
-- 004_contract left to the relay, now refused at INSERT:
--
-- An ordering_key of '' (<table>_ordering_key_length: NULL, or 1 to 256
-- bytes). The relay published such a row without a key; pending ones
-- become NULL here, which is how they go out.
--
-- Every white space in a topic that Go's unicode.IsSpace reports
-- (<table>_topic_chars): besides space and the control characters, U+0085,
-- U+00A0, U+1680, U+2000 to U+200A, U+2028, U+2029, U+202F, U+205F and
-- U+3000. The relay parks such a row dead; pending ones are parked here,
-- with "invalid row: …" in last_error, as 004_contract parks rows.
--
-- As in 004_contract the constraints bind rows still to deliver and are
-- added NOT VALID (no scan of the table, the lock held for milliseconds);
-- after the parking, `ALTER TABLE <table> VALIDATE CONSTRAINT <table>_<rule>`
-- succeeds whenever you choose to run it.
LOCK TABLE {{table}} IN ACCESS EXCLUSIVE MODE;

UPDATE {{table}} SET ordering_key = NULL
WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key = '';

UPDATE {{table}}
SET dead_at = now(), last_error = 'invalid row: topic contains white space or a control character'
WHERE published_at IS NULL AND dead_at IS NULL
  AND topic ~ '[\x01-\x20\x7f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]';

ALTER TABLE {{table}}
    DROP CONSTRAINT IF EXISTS {{ident "topic_chars"}},
    ADD CONSTRAINT {{ident "topic_chars"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR topic !~ '[\x01-\x20\x7f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]') NOT VALID,
    DROP CONSTRAINT IF EXISTS {{ident "ordering_key_length"}},
    ADD CONSTRAINT {{ident "ordering_key_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR octet_length(ordering_key) BETWEEN 1 AND 256) NOT VALID;
