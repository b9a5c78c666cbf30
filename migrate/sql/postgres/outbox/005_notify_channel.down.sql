-- The notify function of 003_notify.
CREATE OR REPLACE FUNCTION {{name "notify"}}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {{name "wake"}} WHERE armed) THEN
        PERFORM pg_notify('txbox_' || TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, '');
    END IF;
    RETURN NULL;
END
$$;
