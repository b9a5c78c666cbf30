-- An inbox table: one row per (source, message id) a consumer has received.
-- See docs/guide/inbox.md. The primary key is what makes handling exactly-once:
-- a second copy of a message conflicts with the first one's row.
CREATE TABLE {{table}} (
    source       text        NOT NULL CHECK (source <> ''),
    message_id   text        NOT NULL CHECK (message_id <> ''),
    received_at  timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,
    metadata     jsonb,
    PRIMARY KEY (source, message_id)
);

-- Sweep deletes rows by age of receipt.
CREATE INDEX {{index "received"}} ON {{table}} (received_at);
