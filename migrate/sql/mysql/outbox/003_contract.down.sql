-- Rows the up migration parked dead stay dead: `txbox dead redrive` sends
-- them again. MySQL 8 has no DROP CONSTRAINT IF EXISTS: when a down was
-- interrupted between this statement and its txbox_migrations row, the
-- next one finds the constraints gone and goes on (Migrator.Down).
ALTER TABLE {{table}}
    DROP CONSTRAINT {{ident "message_id_length"}},
    DROP CONSTRAINT {{ident "message_id_control"}},
    DROP CONSTRAINT {{ident "topic_length"}},
    DROP CONSTRAINT {{ident "topic_chars"}},
    DROP CONSTRAINT {{ident "ordering_key_length"}},
    DROP CONSTRAINT {{ident "ordering_key_control"}},
    DROP CONSTRAINT {{ident "headers_object"}};
