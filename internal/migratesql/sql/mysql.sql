-- Statements of package txboxmigrate on MySQL and MariaDB. {{table}} is the
-- quoted tracking table, txbox_migrations.

-- name: create_tracking
CREATE TABLE IF NOT EXISTS {{table}} (
    target     VARCHAR(200) NOT NULL,
    version    integer NOT NULL,
    name       VARCHAR(200) NOT NULL,
    applied_at DATETIME(6) NOT NULL,
    PRIMARY KEY (target, version)
)

-- name: applied
SELECT target, version, applied_at, name FROM {{table}}

-- DDL commits implicitly, so a table lock would not last: a named lock of
-- the connection serialises concurrent Ups instead. lock returns 1 when it
-- got the lock within 60 seconds.
-- name: lock
SELECT GET_LOCK('txbox_migrate', 60)

-- name: unlock
DO RELEASE_LOCK('txbox_migrate')

-- Run after lock: a migration's DDL gives up waiting for a table's
-- metadata lock after ? seconds (lock_wait_timeout, by default a year):
-- while it waits, every session that asks for the table after it queues
-- behind it. The setting is the session's: lock_timeout_reset restores it
-- before the connection goes back to the pool.
-- name: lock_timeout
SET SESSION lock_wait_timeout = ?

-- name: lock_timeout_reset
SET SESSION lock_wait_timeout = DEFAULT

-- name: record
INSERT INTO {{table}} (target, version, name, applied_at) VALUES (?, ?, ?, ?)

-- Migrator.Down removes the row of a migration it reverted.
-- name: forget
DELETE FROM {{table}} WHERE target = ? AND version = ?

-- The statements a script for another tool (goose, mysql) runs to record
-- one migration, idempotently: %s is the quoted target, %d the version, %s
-- the quoted name; script_forget deletes that row (a down script).
-- name: script_record
INSERT IGNORE INTO {{table}} (target, version, name, applied_at) VALUES (%s, %d, %s, UTC_TIMESTAMP(6))

-- name: script_forget
DELETE FROM {{table}} WHERE target = %s AND version = %d
