// Package migratesql holds package txboxmigrate's own SQL for each dialect: the
// tracking table and the lock that serialises concurrent Ups and Downs. Each dialect
// is one type (postgres.go, sqlite.go, mysql.go) that owns its embedded SQL
// file and its arguments. The migrations themselves are in txboxmigrate/sql.
package migratesql

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox/internal/sqltext"
	"github.com/txbox/txbox/txboxdriver"
)

// Dialect is one dialect's tracking SQL on one tracking table.
type Dialect interface {
	// SetupLock returns the statement that serialises, inside a
	// transaction, the creation of the schema and the tracking table, or
	// "" when the dialect needs none.
	SetupLock() string
	// CreateSchema returns the statement creating the schema, or "" when
	// the dialect has no schemas.
	CreateSchema() string
	// CreateTracking returns the statement creating the tracking table
	// if it is missing.
	CreateTracking() string
	// Applied returns the query of the tracking rows: target, version,
	// applied_at (a time.Time, or RFC 3339 text) and name.
	Applied() string
	// Lock serialises concurrent Ups and Downs from inside tx. The lock lasts until
	// tx ends or unlock runs, whichever comes first; run unlock before
	// the commit.
	Lock(ctx context.Context, tx txboxdriver.Tx) (unlock func(context.Context) error, err error)
	// Record inserts the tracking row of one applied migration.
	Record(ctx context.Context, ex txboxdriver.Executor, target string, version int, name string, at time.Time) error
	// Forget deletes the tracking row of one reverted migration.
	Forget(ctx context.Context, ex txboxdriver.Executor, target string, version int) error
	// LockTimeout makes the statements that follow in tx give up waiting
	// for a lock on a table after d, and returns what undoes it before tx
	// ends: nothing on PostgreSQL, whose setting is local to tx; MySQL's
	// is the session's, restored to its default. SQLite has none.
	LockTimeout(ctx context.Context, tx txboxdriver.Tx, d time.Duration) (restore func(context.Context) error, err error)
	// LockTimedOut reports whether err is a statement that gave up
	// waiting for a lock after LockTimeout.
	LockTimedOut(err error) bool
	// Holders describes the other sessions that hold a lock on table (the
	// quoted, qualified name), oldest transaction first, or returns ""
	// when the dialect cannot tell.
	Holders(ctx context.Context, ex txboxdriver.Executor, table string) (string, error)

	// ScriptLock returns the statement with which a script for another
	// tool waits, inside its transaction, for a concurrent Up or Down, or
	// "" when the dialect has none that lasts.
	ScriptLock() string
	// ScriptRecord returns the statement that records, in a script, one
	// applied migration, and does nothing when it is recorded already.
	ScriptRecord(target string, version int, name string) string
	// ScriptForget returns the statement that deletes, in a script, the
	// record of one reverted migration.
	ScriptForget(target string, version int) string
}

// New returns the tracking SQL of dialect d for table in schema (both
// validated; schema may be empty).
func New(d txboxdriver.Dialect, schema, table string) (Dialect, error) {
	switch d {
	case txboxdriver.Postgres:
		p := &postgres{}
		return p, p.load(d, postgresSQL, schema, table, map[string]*string{"setup_lock": &p.setupLock, "create_schema": &p.createSchema, "lock": &p.lock,
			"lock_timeout": &p.lockTimeout, "lock_holders": &p.holders, "script_lock": &p.scriptLock})
	case txboxdriver.SQLite:
		s := &sqlite{}
		return s, s.load(d, sqliteSQL, schema, table, nil)
	case txboxdriver.MySQL:
		m := &mysql{}
		return m, m.load(d, mysqlSQL, schema, table, map[string]*string{"lock": &m.lock, "unlock": &m.unlock,
			"lock_timeout": &m.lockTimeout, "lock_timeout_reset": &m.lockTimeoutReset})
	}
	return nil, fmt.Errorf("txbox: no migrations for dialect %q", d)
}

// queries are the tracking statements, rendered for one table, and the
// methods whose arguments are the same in every dialect.
type queries struct {
	setupLock, createSchema, createTracking, applied, record, forget string
	scriptLock, scriptRecord, scriptForget                           string
}

func (q *queries) load(d txboxdriver.Dialect, file, schema, table string, extra map[string]*string) error {
	dest := map[string]*string{"create_tracking": &q.createTracking, "applied": &q.applied, "record": &q.record, "forget": &q.forget,
		"script_record": &q.scriptRecord, "script_forget": &q.scriptForget}
	return sqltext.Load("migrate/"+string(d), file, sqltext.Names(d, schema, table), dest, extra)
}

func (q *queries) SetupLock() string      { return q.setupLock }
func (q *queries) CreateSchema() string   { return q.createSchema }
func (q *queries) CreateTracking() string { return q.createTracking }
func (q *queries) Applied() string        { return q.applied }

func (q *queries) Record(ctx context.Context, ex txboxdriver.Executor, target string, version int, name string, at time.Time) error {
	_, err := ex.Exec(ctx, q.record, target, version, name, at.UTC())
	return err
}

func (q *queries) Forget(ctx context.Context, ex txboxdriver.Executor, target string, version int) error {
	_, err := ex.Exec(ctx, q.forget, target, version)
	return err
}

func (q *queries) ScriptLock() string { return q.scriptLock }

func (q *queries) ScriptRecord(target string, version int, name string) string {
	return fmt.Sprintf(q.scriptRecord, literal(target), version, literal(name))
}

func (q *queries) ScriptForget(target string, version int) string {
	return fmt.Sprintf(q.scriptForget, literal(target), version)
}

// literal quotes s as an SQL string literal (targets and names are
// validated identifiers; the quotes are doubled all the same).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func noUnlock(context.Context) error { return nil }
