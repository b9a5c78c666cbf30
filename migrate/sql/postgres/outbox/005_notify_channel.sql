-- The notify trigger's channel within PostgreSQL's 63-byte identifier
-- limit. 'txbox_<schema>.<table>' outgrows it for long names: pg_notify
-- then fails the INSERT ("channel name too long") while the doorbell is
-- armed, and the relay, whose LISTEN truncates the name, hears nothing. A
-- channel name over 63 bytes becomes 'txbox_' and the MD5 of that name in
-- hex (38 bytes); the relay derives the same (relay/notify.go
-- notifyChannel). Shorter names keep their channel.
CREATE OR REPLACE FUNCTION {{name "notify"}}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    channel text := 'txbox_' || TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME;
BEGIN
    IF EXISTS (SELECT 1 FROM {{name "wake"}} WHERE armed) THEN
        IF octet_length(channel) > 63 THEN
            channel := 'txbox_' || md5(channel);
        END IF;
        PERFORM pg_notify(channel, '');
    END IF;
    RETURN NULL;
END
$$;
