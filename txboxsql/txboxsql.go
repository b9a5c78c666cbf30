// Package txboxsql is txbox's driver for database/sql: the caller's
// transactions are *sql.Tx, so every ORM that exposes one (GORM, Bun, sqlx,
// ent) works. It imports no database engine: the program picks one
// (github.com/jackc/pgx/v5/stdlib for PostgreSQL, modernc.org/sqlite for
// SQLite, github.com/go-sql-driver/mysql for MySQL) and says which dialect it
// speaks.
//
//	db, _ := sql.Open("sqlite", txboxsql.SQLiteDSN("app.db")) // WAL, busy timeout, immediate transactions
//	drv := txboxsql.New(db, txboxdriver.SQLite)
//
// The Driver classifies the errors of modernc.org/sqlite and
// go-sql-driver/mysql by itself (see Driver.IsTransient, Driver.IsRejected
// and Driver.IsConflict); Options widen that for other engines.
package txboxsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/txbox/txbox/txboxdriver"
)

// Driver adapts a *sql.DB. It opens nothing and closes nothing: whoever
// opened the DB closes it.
type Driver struct {
	db      *sql.DB
	dialect txboxdriver.Dialect
	opts    Options
}

var (
	_ txboxdriver.Driver[*sql.Tx]     = (*Driver)(nil)
	_ txboxdriver.ErrorClassifier     = (*Driver)(nil)
	_ txboxdriver.RejectionClassifier = (*Driver)(nil)
	_ txboxdriver.ConflictClassifier  = (*Driver)(nil)
)

// Options are the optional settings of NewWithOptions.
type Options struct {
	// IsTransient recognises the errors of the program's engine that say
	// the database failed rather than the statement (see
	// txboxdriver.ErrorClassifier), beyond what Driver.IsTransient recognises
	// by itself (modernc.org/sqlite and go-sql-driver/mysql): for another
	// engine, such as mattn/go-sqlite3. Default: nil (nothing beyond
	// txbox's own checks).
	IsTransient func(err error) bool
	// IsRejected recognises the errors of the program's engine that say
	// the database refused the work itself (see txboxdriver.IsRejected: a
	// constraint or data error, counted against the message), beyond the
	// SQLSTATEs txbox recognises by itself and what Driver.IsRejected
	// recognises (modernc.org/sqlite and go-sql-driver/mysql). Default:
	// nil.
	IsRejected func(err error) bool
	// IsConflict recognises the errors of the program's engine that say
	// the transaction lost a deadlock or a serialization failure and was
	// rolled back (see txboxdriver.ConflictClassifier: run again at once),
	// beyond the SQLSTATEs txbox recognises by itself and what
	// Driver.IsConflict recognises (go-sql-driver/mysql); Driver.IsTransient
	// accepts them too (a conflict that loses every time it runs again is a
	// database failure). Default: nil.
	IsConflict func(err error) bool
}

// New returns a Driver over db, which speaks dialect, with the zero
// Options.
func New(db *sql.DB, dialect txboxdriver.Dialect) *Driver { return &Driver{db: db, dialect: dialect} }

// NewWithOptions returns a Driver over db, which speaks dialect, with opts.
func NewWithOptions(db *sql.DB, dialect txboxdriver.Dialect, opts Options) *Driver {
	return &Driver{db: db, dialect: dialect, opts: opts}
}

// SQLite's primary result codes: another connection holds a lock; the
// data was refused.
const (
	sqliteBusy       = 5
	sqliteLocked     = 6
	sqliteTooBig     = 18
	sqliteConstraint = 19
	sqliteMismatch   = 20
	sqliteRange      = 25
)

// IsTransient implements txboxdriver.ErrorClassifier: on SQLite, an error with
// a Code() int method whose primary result code is SQLITE_BUSY or
// SQLITE_LOCKED (modernc.org/sqlite); on MySQL, go-sql-driver/mysql's
// ErrInvalidConn and a *mysql.MySQLError numbered 1040 (too many
// connections), 1053 (server shutdown), 1205 (lock wait timeout), 1213
// (deadlock), 2006 or 2013 (server gone away, connection lost);
// on PostgreSQL, pgx's pgconn.ErrConnClosed ("conn closed": a statement on
// a connection pgx found broken, also after it was sent); then
// Options.IsTransient and Options.IsConflict, if set. txboxsql imports no
// engine: it recognises go-sql-driver's and pgx's errors by their package
// path or type and text.
func (d *Driver) IsTransient(err error) bool {
	if d.dialect == txboxdriver.MySQL && mysqlTransient(err) {
		return true
	}
	if d.dialect == txboxdriver.Postgres && pgConnClosed(err) {
		return true
	}
	if d.dialect == txboxdriver.SQLite {
		var coded interface{ Code() int }
		if errors.As(err, &coded) {
			if c := coded.Code() & 0xff; c == sqliteBusy || c == sqliteLocked {
				return true
			}
		}
	}
	return d.opts.IsTransient != nil && d.opts.IsTransient(err) ||
		d.opts.IsConflict != nil && d.opts.IsConflict(err)
}

// IsRejected implements txboxdriver.RejectionClassifier: on SQLite, an error
// with a Code() int method whose primary result code is SQLITE_CONSTRAINT
// (also a deferred foreign key checked at COMMIT), SQLITE_MISMATCH,
// SQLITE_TOOBIG or SQLITE_RANGE; on MySQL, a *mysql.MySQLError numbered
// 1048 (column cannot be null), 1062 (duplicate entry), 1264 (out of
// range), 1366 (incorrect value), 1406 (data too long), 1451 or 1452
// (foreign key) or 3819 (check constraint); then Options.IsRejected, if
// set.
func (d *Driver) IsRejected(err error) bool {
	if d.dialect == txboxdriver.MySQL && mysqlRejected(err) {
		return true
	}
	if d.dialect == txboxdriver.SQLite {
		var coded interface{ Code() int }
		if errors.As(err, &coded) {
			switch coded.Code() & 0xff {
			case sqliteConstraint, sqliteMismatch, sqliteTooBig, sqliteRange:
				return true
			}
		}
	}
	return d.opts.IsRejected != nil && d.opts.IsRejected(err)
}

// IsConflict implements txboxdriver.ConflictClassifier: on MySQL, a
// *mysql.MySQLError numbered 1213 (deadlock: InnoDB rolled the whole
// transaction back); then Options.IsConflict, if set. Every error it
// accepts, IsTransient accepts too.
func (d *Driver) IsConflict(err error) bool {
	if d.dialect == txboxdriver.MySQL && mysqlConflict(err) {
		return true
	}
	return d.opts.IsConflict != nil && d.opts.IsConflict(err)
}

// Dialect returns the dialect given to New.
func (d *Driver) Dialect() txboxdriver.Dialect { return d.dialect }

// DB returns the underlying *sql.DB.
func (d *Driver) DB() *sql.DB { return d.db }

// Pool returns the DB as a txboxdriver.Pool.
func (d *Driver) Pool() txboxdriver.Pool { return dbExec{d.db} }

// UnwrapTx returns an Executor running inside tx.
func (d *Driver) UnwrapTx(tx *sql.Tx) txboxdriver.Executor { return txExec{tx} }

// BeginTx begins a transaction on the DB.
func (d *Driver) BeginTx(ctx context.Context) (*sql.Tx, txboxdriver.Tx, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return tx, txExec{tx}, nil
}

type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func exec(ctx context.Context, q querier, query string, args []any) (int64, error) {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, nil // the engine does not report it; callers that need it check otherwise
	}
	return n, nil
}

func query(ctx context.Context, q querier, query string, args []any) (txboxdriver.Rows, error) {
	return q.QueryContext(ctx, query, args...)
}

type dbExec struct{ db *sql.DB }

func (d dbExec) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return exec(ctx, d.db, q, args)
}
func (d dbExec) Query(ctx context.Context, q string, args ...any) (txboxdriver.Rows, error) {
	return query(ctx, d.db, q, args)
}
func (d dbExec) Begin(ctx context.Context) (txboxdriver.Tx, error) {
	return d.BeginTx(ctx, txboxdriver.TxOptions{})
}

var _ txboxdriver.TxBeginner = dbExec{}

func (d dbExec) BeginTx(ctx context.Context, opts txboxdriver.TxOptions) (txboxdriver.Tx, error) {
	var o *sql.TxOptions // nil: the DB's default
	switch opts.Isolation {
	case txboxdriver.LevelDefault:
	case txboxdriver.LevelReadCommitted:
		o = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	case txboxdriver.LevelRepeatableRead:
		o = &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	case txboxdriver.LevelSerializable:
		o = &sql.TxOptions{Isolation: sql.LevelSerializable}
	default:
		return nil, fmt.Errorf("txboxsql: unknown isolation level %d", opts.Isolation)
	}
	tx, err := d.db.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return txExec{tx}, nil
}

type txExec struct{ tx *sql.Tx }

func (t txExec) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return exec(ctx, t.tx, q, args)
}
func (t txExec) Query(ctx context.Context, q string, args ...any) (txboxdriver.Rows, error) {
	return query(ctx, t.tx, q, args)
}
func (t txExec) Commit(context.Context) error   { return t.tx.Commit() }
func (t txExec) Rollback(context.Context) error { return t.tx.Rollback() }
