-- The message contract in the table (see docs/sql-contract.md): a plain-SQL
-- writer that breaks a rule the database can check gets an error at INSERT
-- naming the rule's constraint, <table>_<rule>. The rules the relay checks
-- as well (txbox.Message.Validate) but a CHECK cannot express well (valid
-- UTF-8 is guaranteed by a UTF-8 database; header names and values) stay
-- with the relay, which parks a row that breaks one dead at once.
--
-- The rules bind rows still to deliver (published_at and dead_at NULL),
-- which is every row a writer adds: a row already published, or parked
-- dead, is history and is never checked. So existing rows cannot make this
-- migration fail, and the relay can always park a bad row dead.
--
-- The constraints are added NOT VALID: PostgreSQL checks every new or
-- updated row but does not scan the table, so the migration takes its
-- lock for milliseconds however large the table is. Pending rows that
-- break a rule are parked first (the scan reads the pending index only),
-- so `ALTER TABLE <table> VALIDATE CONSTRAINT <table>_<rule>` succeeds
-- whenever you choose to run it; it only records that old rows were
-- scanned and changes nothing txbox does.
--
-- Control characters are spelled as ranges rather than [[:cntrl:]], whose
-- meaning depends on the database's locale: the same bytes as Validate,
-- U+0001 to U+001F and U+007F. Topics also refuse the white space Validate
-- refuses (space, U+00A0, U+2028, U+2029).

-- Writers wait for the few milliseconds the migration takes, so no row can
-- slip in between the parking below and the constraints.
LOCK TABLE {{table}} IN ACCESS EXCLUSIVE MODE;

UPDATE {{table}} o
SET dead_at = now(), last_error = 'invalid row: ' || b.reason
FROM (
    SELECT id, CASE
        WHEN octet_length(topic) NOT BETWEEN 1 AND 256 THEN 'topic is ' || octet_length(topic) || ' bytes, want 1 to 256'
        WHEN topic ~ '[\x01-\x20\x7f\u00a0\u2028\u2029]' THEN 'topic contains white space or a control character'
        WHEN octet_length(message_id) NOT BETWEEN 1 AND 256 THEN 'message_id is ' || octet_length(message_id) || ' bytes, want 1 to 256'
        WHEN message_id ~ '[\x01-\x1f\x7f]' THEN 'message_id contains a control character'
        WHEN octet_length(ordering_key) > 256 THEN 'ordering_key is ' || octet_length(ordering_key) || ' bytes, over the limit of 256'
        WHEN ordering_key ~ '[\x01-\x1f\x7f]' THEN 'ordering_key contains a control character'
        WHEN jsonb_typeof(headers) <> 'object' THEN 'headers is a JSON ' || jsonb_typeof(headers) || ', not an object'
    END AS reason
    FROM {{table}}
    WHERE published_at IS NULL AND dead_at IS NULL
) b
WHERE o.id = b.id AND b.reason IS NOT NULL;

ALTER TABLE {{table}}
    ADD CONSTRAINT {{ident "message_id_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR octet_length(message_id) BETWEEN 1 AND 256) NOT VALID,
    ADD CONSTRAINT {{ident "message_id_control"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR message_id !~ '[\x01-\x1f\x7f]') NOT VALID,
    ADD CONSTRAINT {{ident "topic_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR octet_length(topic) BETWEEN 1 AND 256) NOT VALID,
    ADD CONSTRAINT {{ident "topic_chars"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR topic !~ '[\x01-\x20\x7f\u00a0\u2028\u2029]') NOT VALID,
    ADD CONSTRAINT {{ident "ordering_key_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR octet_length(ordering_key) <= 256) NOT VALID,
    ADD CONSTRAINT {{ident "ordering_key_control"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR ordering_key !~ '[\x01-\x1f\x7f]') NOT VALID,
    ADD CONSTRAINT {{ident "headers_object"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR jsonb_typeof(headers) = 'object') NOT VALID;
