-- Millisecond wake-up without taxing writers. PostgreSQL serialises the
-- commits of every transaction that sent a notification, so notifying on
-- every insert would halve a busy system's commit rate. Instead a relay that
-- has gone idle arms a doorbell (the one row of the unlogged table
-- <table>_wake), and an INSERT statement notifies only while the doorbell is
-- armed. A relay at work disarms it: under load writers send nothing. The
-- relay listens on the channel 'txbox_<schema>.<table>' and polls when no
-- notification can arrive (e.g. behind PgBouncer in transaction mode).
CREATE UNLOGGED TABLE {{name "wake"}} (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    armed boolean NOT NULL DEFAULT false
);

CREATE FUNCTION {{name "notify"}}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {{name "wake"}} WHERE armed) THEN
        PERFORM pg_notify('txbox_' || TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER {{ident "notify"}} AFTER INSERT ON {{table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{name "notify"}}();
