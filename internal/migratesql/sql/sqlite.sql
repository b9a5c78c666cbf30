-- Statements of package txboxmigrate on SQLite. {{table}} is the quoted tracking
-- table, txbox_migrations. applied_at is RFC 3339 text. SQLite has one
-- writer at a time: concurrent Ups need no lock of their own.

-- name: create_tracking
CREATE TABLE IF NOT EXISTS {{table}} (
    target     text NOT NULL,
    version    integer NOT NULL,
    name       text NOT NULL,
    applied_at TEXT NOT NULL,
    PRIMARY KEY (target, version)
)

-- name: applied
SELECT target, version, applied_at, name FROM {{table}}

-- name: record
INSERT INTO {{table}} (target, version, name, applied_at) VALUES (?, ?, ?, ?)

-- Migrator.Down removes the row of a migration it reverted.
-- name: forget
DELETE FROM {{table}} WHERE target = ? AND version = ?

-- The statements a script for another tool (goose, sqlite3) runs to record
-- one migration, idempotently: %s is the quoted target, %d the version, %s
-- the quoted name; script_forget deletes that row (a down script).
-- name: script_record
INSERT OR IGNORE INTO {{table}} (target, version, name, applied_at) VALUES (%s, %d, %s, strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now'))

-- name: script_forget
DELETE FROM {{table}} WHERE target = %s AND version = %d
