-- Per-key order = commit order. A row's id comes from a sequence when the
-- row is inserted, not when its transaction commits, so two transactions
-- adding the same key concurrently could commit in the other order than
-- their ids. This trigger makes a transaction that inserts a keyed row take
-- a transaction-scoped advisory lock on the key and only then draw the row's
-- id: a second transaction adding the same key waits until the first has
-- committed or rolled back, and its id is larger. Rows without a key are not
-- touched. Plain SQL writers get the same guarantee: it is in the table.
CREATE FUNCTION {{name "key_order"}}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME || ':' || NEW.ordering_key, 0));
    NEW.id := nextval(pg_get_serial_sequence(format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), 'id'));
    RETURN NEW;
END
$$;

CREATE TRIGGER {{ident "key_order"}} BEFORE INSERT ON {{table}}
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL)
    EXECUTE FUNCTION {{name "key_order"}}();
