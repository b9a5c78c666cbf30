-- The message contract in the table (see docs/sql-contract.md): a plain-SQL
-- writer that breaks a rule the database can check gets an error at INSERT
-- naming the rule's constraint, <table>_<rule> (MySQL 3819, MariaDB 4025).
-- In strict mode (the default) a value longer than its column's 256
-- characters fails first with "Data too long"; the constraints count bytes
-- (LENGTH), which is what the brokers limit. The rules the relay checks as
-- well (txbox.Message.Validate) but a CHECK cannot express well (valid
-- UTF-8, header names and values) stay with the relay, which parks a row
-- that breaks one dead at once.
--
-- The rules bind rows still to deliver (published_at and dead_at NULL),
-- which is every row a writer adds: a row already published, or parked
-- dead, is history and is never checked. MySQL and MariaDB check every
-- existing row when a CHECK is added, so this migration first parks the
-- pending rows that break a rule dead, with "invalid row: <reason>" in
-- last_error (see `txbox dead list`), just as the relay would have; then
-- no existing row can make the ALTER fail.
--
-- Control characters are U+0001 to U+001F and U+007F, as in Validate,
-- spelled with CHAR(): backslash escapes would change meaning under
-- NO_BACKSLASH_ESCAPES. Topics also refuse the white space Validate
-- refuses (space, U+00A0, U+2028, U+2029).
--
-- DDL commits implicitly: the parking commits with the ALTER. One ALTER
-- adds every constraint, so either all or none are there. A row written
-- between the parking and the ALTER makes the ALTER fail; run Up again.
-- An Up interrupted after the ALTER but before its bookkeeping row fails
-- on the next run with a duplicate constraint name (MySQL 8 has no ADD
-- CONSTRAINT IF NOT EXISTS): the constraints are in place, so insert the
-- row into txbox_migrations by hand.
UPDATE {{table}} o
JOIN (
    SELECT id, CASE
        WHEN LENGTH(topic) NOT BETWEEN 1 AND 256 THEN CONCAT('topic is ', LENGTH(topic), ' bytes, want 1 to 256')
        WHEN topic REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(32 USING utf8mb4), CHAR(127 USING utf8mb4), CHAR(0xC2A0 USING utf8mb4), CHAR(0xE280A8 USING utf8mb4), CHAR(0xE280A9 USING utf8mb4), ']') THEN 'topic contains white space or a control character'
        WHEN LENGTH(message_id) NOT BETWEEN 1 AND 256 THEN CONCAT('message_id is ', LENGTH(message_id), ' bytes, want 1 to 256')
        WHEN message_id REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(31 USING utf8mb4), CHAR(127 USING utf8mb4), ']') THEN 'message_id contains a control character'
        WHEN LENGTH(ordering_key) > 256 THEN CONCAT('ordering_key is ', LENGTH(ordering_key), ' bytes, over the limit of 256')
        WHEN ordering_key REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(31 USING utf8mb4), CHAR(127 USING utf8mb4), ']') THEN 'ordering_key contains a control character'
        WHEN NOT JSON_VALID(headers) THEN 'headers is not JSON'
        WHEN JSON_TYPE(headers) <> 'OBJECT' THEN CONCAT('headers is a JSON ', LOWER(JSON_TYPE(headers)), ', not an object')
    END AS reason
    FROM {{table}}
    WHERE published_at IS NULL AND dead_at IS NULL
) b ON o.id = b.id
SET o.dead_at = UTC_TIMESTAMP(6), o.last_error = CONCAT('invalid row: ', b.reason)
WHERE b.reason IS NOT NULL;

ALTER TABLE {{table}}
    ADD CONSTRAINT {{ident "message_id_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR LENGTH(message_id) BETWEEN 1 AND 256),
    ADD CONSTRAINT {{ident "message_id_control"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR message_id NOT REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(31 USING utf8mb4), CHAR(127 USING utf8mb4), ']')),
    ADD CONSTRAINT {{ident "topic_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR LENGTH(topic) BETWEEN 1 AND 256),
    ADD CONSTRAINT {{ident "topic_chars"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR topic NOT REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(32 USING utf8mb4), CHAR(127 USING utf8mb4), CHAR(0xC2A0 USING utf8mb4), CHAR(0xE280A8 USING utf8mb4), CHAR(0xE280A9 USING utf8mb4), ']')),
    ADD CONSTRAINT {{ident "ordering_key_length"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR ordering_key IS NULL OR LENGTH(ordering_key) <= 256),
    ADD CONSTRAINT {{ident "ordering_key_control"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR ordering_key IS NULL OR ordering_key NOT REGEXP CONCAT('[', CHAR(1 USING utf8mb4), '-', CHAR(31 USING utf8mb4), CHAR(127 USING utf8mb4), ']')),
    ADD CONSTRAINT {{ident "headers_object"}}
        CHECK (published_at IS NOT NULL OR dead_at IS NOT NULL OR CASE WHEN JSON_VALID(headers) THEN JSON_TYPE(headers) = 'OBJECT' ELSE FALSE END);
