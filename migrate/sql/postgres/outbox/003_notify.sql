-- Millisecond wake-up: after each INSERT statement, notify the relays
-- listening on the channel named after the table. PostgreSQL folds identical
-- notifications of one transaction into one, so a transaction that adds a
-- thousand messages sends one notification, not a thousand. Relays fall
-- back to polling when notifications do not arrive (e.g. behind PgBouncer in
-- transaction mode).
CREATE FUNCTION {{name "notify"}}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('txbox_' || TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, '');
    RETURN NULL;
END
$$;

CREATE TRIGGER {{ident "notify"}} AFTER INSERT ON {{table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{name "notify"}}();
