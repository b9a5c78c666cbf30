-- Rows the up migration parked dead stay dead: `txbox dead redrive` sends
-- them again.
ALTER TABLE {{table}}
    DROP CONSTRAINT IF EXISTS {{ident "message_id_length"}},
    DROP CONSTRAINT IF EXISTS {{ident "message_id_control"}},
    DROP CONSTRAINT IF EXISTS {{ident "topic_length"}},
    DROP CONSTRAINT IF EXISTS {{ident "topic_chars"}},
    DROP CONSTRAINT IF EXISTS {{ident "ordering_key_length"}},
    DROP CONSTRAINT IF EXISTS {{ident "ordering_key_control"}},
    DROP CONSTRAINT IF EXISTS {{ident "headers_object"}};
