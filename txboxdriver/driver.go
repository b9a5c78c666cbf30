// Package txboxdriver is the seam between txbox and a database library.
//
// txbox's outbox, relay, inbox and migrations talk to a database only through
// the small interfaces below. The implementations shipped with txbox are
// txboxpgx (pgx v5) and txboxsql (database/sql, for PostgreSQL, SQLite and
// MySQL). A third-party driver implements Driver for its own transaction type.
package txboxdriver

import (
	"context"
	"errors"
)

// Dialect names the SQL dialect a driver speaks; it selects the embedded SQL.
type Dialect string

// The dialects txbox ships SQL for.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
	MySQL    Dialect = "mysql"
)

// ErrNoRows is returned by QueryRow-style helpers when nothing matched.
var ErrNoRows = errors.New("txbox/driver: no rows")

// Executor runs SQL: a pool, a connection or a transaction.
// Placeholders are the dialect's own ($1 on PostgreSQL, ? elsewhere).
type Executor interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// Query runs a query; the caller closes the rows.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
}

// Rows is the result of Query, the common part of pgx.Rows and *sql.Rows.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Tx is a transaction begun by a Pool.
type Tx interface {
	Executor
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Pool is a caller-owned pool of connections. txbox never closes it.
type Pool interface {
	Executor
	Begin(ctx context.Context) (Tx, error)
}

// IsolationLevel is a transaction's isolation level.
type IsolationLevel int

// The isolation levels txbox asks for. LevelDefault leaves the connection's
// own level.
const (
	LevelDefault IsolationLevel = iota
	LevelReadCommitted
	LevelRepeatableRead
	LevelSerializable
)

// String returns the level as SQL spells it ("" for LevelDefault).
func (l IsolationLevel) String() string {
	switch l {
	case LevelReadCommitted:
		return "READ COMMITTED"
	case LevelRepeatableRead:
		return "REPEATABLE READ"
	case LevelSerializable:
		return "SERIALIZABLE"
	}
	return ""
}

// TxOptions are the options of TxBeginner.BeginTx.
type TxOptions struct {
	// Isolation is the transaction's isolation level. Default:
	// LevelDefault (the connection's own level).
	Isolation IsolationLevel
}

// TxBeginner is an optional capability of a Pool: beginning a transaction
// with options. txbox asks a Pool for it with a type assertion and, when a
// Pool lacks it, falls back to what Begin and SQL can do (on MySQL, the
// relay's READ COMMITTED claim transaction then takes a few more round
// trips). txboxpgx and txboxsql implement it. A Pool that implements it
// must return an error for a level it cannot honour rather than ignore it.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts TxOptions) (Tx, error)
}

// Statement is one SQL statement and its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// QueryBeginner is an optional capability of a Pool: begin a transaction,
// run setup statements in it and then a query, all sent to the server at
// once: one round trip where there would be one per statement. txbox's
// relay begins each claim with it where the Pool has it (txboxpgx does):
// BEGIN, the claim transaction's settings and the claim. When BEGIN or a
// setup statement fails, BeginQuery ends the transaction and returns the
// error; an error of the query may also come from the Rows (Err), and the
// caller then rolls the Tx back. The Tx outlives ctx, as Begin's does.
type QueryBeginner interface {
	BeginQuery(ctx context.Context, opts TxOptions, setup []Statement, query Statement) (Tx, Rows, error)
}

// ExecCommitter is an optional capability of a Tx: run a statement and
// commit, both sent to the server at once. txbox's relay commits its marks
// with it where the Tx has it (txboxpgx's from BeginQuery). When the
// statement fails nothing is committed and the caller rolls back; Rollback
// after ExecCommit is harmless either way.
type ExecCommitter interface {
	ExecCommit(ctx context.Context, sql string, args ...any) (int64, error)
}

// ChainBeginner is an optional capability of a Tx: run a statement,
// commit, then begin the next transaction on the same connection and run
// its setup statements and a query, all sent to the server at once: one
// round trip where ExecCommit and BeginQuery take two. txbox's relay marks
// a keyed batch and claims the next one with it where the Tx has it
// (txboxpgx's from BeginQuery): the claim, run after the COMMIT, sees the
// marks. committed reports whether the statement and the COMMIT succeeded;
// when they did and the rest failed, err is that failure and the new
// transaction is already ended. When the statement fails nothing is
// committed and the caller rolls back, as after ExecCommit.
type ChainBeginner interface {
	ExecCommitBeginQuery(ctx context.Context, exec Statement, opts TxOptions, setup []Statement, query Statement) (committed bool, tx Tx, rows Rows, err error)
}

// Driver adapts one database library, whose transaction type is TTx, to txbox.
type Driver[TTx any] interface {
	// Dialect tells which SQL to use.
	Dialect() Dialect
	// Pool returns the pool the driver was built from.
	Pool() Pool
	// UnwrapTx returns an Executor that runs SQL inside the caller's tx.
	UnwrapTx(tx TTx) Executor
	// BeginTx opens a transaction of the caller's own type, with an
	// Executor for it; the inbox uses it to run handlers.
	BeginTx(ctx context.Context) (TTx, Tx, error)
}
