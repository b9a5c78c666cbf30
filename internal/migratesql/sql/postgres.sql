-- Statements of package txboxmigrate on PostgreSQL. {{table}} is the quoted,
-- schema-qualified tracking table, txbox_migrations.

-- Concurrent Ups on a fresh database would race to create the schema and
-- the tracking table (IF NOT EXISTS does not stop two sessions inserting the
-- same catalog row: one fails on pg_namespace_nspname_index). They take
-- this transaction-scoped lock first, one key for the whole database.
-- name: setup_lock
SELECT pg_advisory_xact_lock(hashtextextended('txbox_migrate', 0))

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {{schema}}

-- name: create_tracking
CREATE TABLE IF NOT EXISTS {{table}} (
    target     text NOT NULL,
    version    integer NOT NULL,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL,
    PRIMARY KEY (target, version)
)

-- name: applied
SELECT target, version, applied_at, name FROM {{table}}

-- Concurrent Ups serialise on the tracking table, until the migration's
-- transaction ends.
-- name: lock
LOCK TABLE {{table}} IN EXCLUSIVE MODE

-- Run after lock, so that concurrent Ups still wait for each other: a
-- migration's statements give up waiting for a table's lock after $1 (as
-- '250ms'), local to its transaction. While a statement waits for a lock,
-- every session that asks for the table after it queues behind it: the
-- application's writers of the outbox, for as long as another session's
-- transaction holds the table.
-- name: lock_timeout
SELECT set_config('lock_timeout', $1, true)

-- The other sessions holding a lock on the table $1 (quoted, qualified),
-- the oldest transaction first: for the error of a migration that gave up.
-- name: lock_holders
SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.state, ''), l.mode,
       coalesce(extract(epoch FROM now() - a.xact_start), 0)::float8
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.relation = to_regclass($1) AND l.granted AND l.pid <> pg_backend_pid()
ORDER BY a.xact_start NULLS LAST, a.pid

-- name: record
INSERT INTO {{table}} (target, version, name, applied_at) VALUES ($1, $2, $3, $4)

-- Migrator.Down removes the row of a migration it reverted.
-- name: forget
DELETE FROM {{table}} WHERE target = $1 AND version = $2

-- The statements a script for another tool (goose, atlas, Flyway, psql -f)
-- runs, in the transaction that applies the migrations. script_lock makes
-- it wait for a concurrent migrate up, as lock does. script_record records
-- one migration, idempotently: %s is the quoted target, %d the version, %s
-- the quoted name. script_forget deletes that row (a down script).
-- name: script_lock
LOCK TABLE {{table}} IN EXCLUSIVE MODE

-- name: script_record
INSERT INTO {{table}} (target, version, name, applied_at) VALUES (%s, %d, %s, now()) ON CONFLICT (target, version) DO NOTHING

-- name: script_forget
DELETE FROM {{table}} WHERE target = %s AND version = %d
