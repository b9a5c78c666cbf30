-- Statements of package migrate on PostgreSQL. {{table}} is the quoted,
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

-- name: record
INSERT INTO {{table}} (target, version, name, applied_at) VALUES ($1, $2, $3, $4)

-- Migrator.Down removes the row of a migration it reverted.
-- name: forget
DELETE FROM {{table}} WHERE target = $1 AND version = $2
