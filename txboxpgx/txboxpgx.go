// Package txboxpgx is txbox's driver for PostgreSQL through pgx v5: the
// caller's transactions are pgx.Tx.
//
//	drv := txboxpgx.New(pool) // pool is a *pgxpool.Pool the caller owns
//	ob, err := txbox.New(drv, txbox.Config{})
//	…
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// business writes, then:
//		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Payload: body})
//		return err
//	})
package txboxpgx

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/txboxdriver"
)

// Driver adapts a pgx pool. It opens nothing and closes nothing: whoever
// created the pool closes it.
type Driver struct {
	pool *pgxpool.Pool
}

var (
	_ txboxdriver.Driver[pgx.Tx]      = (*Driver)(nil)
	_ txboxdriver.Listener            = (*Driver)(nil)
	_ txboxdriver.ChannelListener     = (*Driver)(nil)
	_ txboxdriver.ErrorClassifier     = (*Driver)(nil)
	_ txboxdriver.RejectionClassifier = (*Driver)(nil)
)

// New returns a Driver over pool.
func New(pool *pgxpool.Pool) *Driver { return &Driver{pool: pool} }

// Dialect returns txboxdriver.Postgres.
func (d *Driver) Dialect() txboxdriver.Dialect { return txboxdriver.Postgres }

// Pool returns the pool as a txboxdriver.Pool.
func (d *Driver) Pool() txboxdriver.Pool { return poolExec{d.pool} }

// PgxPool returns the underlying pool.
func (d *Driver) PgxPool() *pgxpool.Pool { return d.pool }

// Listen implements txboxdriver.Listener: it takes a connection out of the pool
// for good and LISTENs on channel with it.
func (d *Driver) Listen(ctx context.Context, channel string) (txboxdriver.Notifications, error) {
	pooled, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// A connection that was listening is not returned to the pool.
	conn := pooled.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("listen: %w", err)
	}
	return notifications{conn}, nil
}

type notifications struct{ conn *pgx.Conn }

func (n notifications) Wait(ctx context.Context) (string, error) {
	note, err := n.conn.WaitForNotification(ctx)
	if err != nil {
		return "", err
	}
	return note.Payload, nil
}

func (n notifications) Close(ctx context.Context) error { return n.conn.Close(ctx) }

// ListenChannels implements txboxdriver.ChannelListener: it takes a connection
// out of the pool for good. Waits are ended by their context without
// closing the connection only with pgx's default context watcher
// (pgconn.DeadlineContextWatcherHandler); with another, an ended wait may
// cost the connection, and the caller opens another.
func (d *Driver) ListenChannels(ctx context.Context) (txboxdriver.Channels, error) {
	pooled, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return channels{pooled.Hijack()}, nil
}

type channels struct{ conn *pgx.Conn }

func (c channels) Listen(ctx context.Context, channel string) error {
	_, err := c.conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	return err
}

func (c channels) Unlisten(ctx context.Context, channel string) error {
	_, err := c.conn.Exec(ctx, "UNLISTEN "+pgx.Identifier{channel}.Sanitize())
	return err
}

func (c channels) Wait(ctx context.Context) (string, string, error) {
	note, err := c.conn.WaitForNotification(ctx)
	if err != nil {
		return "", "", err
	}
	return note.Channel, note.Payload, nil
}

func (c channels) Close(ctx context.Context) error { return c.conn.Close(ctx) }

// IsTransient implements txboxdriver.ErrorClassifier with pgx's own types:
// pgconn.SafeToRetry (nothing was sent), a *pgconn.PgError whose code
// txboxdriver.TransientSQLState accepts, and a *pgconn.ConnectError that is not
// the server refusing the connection for good (a wrong password, a missing
// database: a *pgconn.PgError of another class), and pgconn.ErrConnClosed
// (a statement on a connection pgx found broken, also after it was sent).
// The checks txboxdriver.IsTransient makes without pgx (lost connections,
// unexpected EOF) apply as well. A bare io.EOF is not counted: a handler's
// own reads return it too (txboxmigrate counts it in its own statements).
func (d *Driver) IsTransient(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return txboxdriver.TransientSQLState(pgErr.Code)
	}
	if errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}

// IsPermanentConnectError reports whether err, from opening or pinging a
// pool, is one that trying again does not fix: a connection string pgx
// cannot parse (*pgconn.ParseConfigError), or the server refusing the
// connection for good with a *pgconn.PgError of class 28 (invalid
// authorization: user or password) or code 3D000 (no such database). A
// server that is down, restarting or unreachable is not one.
func IsPermanentConnectError(err error) bool {
	var parse *pgconn.ParseConfigError
	if errors.As(err, &parse) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "3D000")
}

// IsMissingTable reports whether err says a table or schema named in a
// statement does not exist: a *pgconn.PgError with code 42P01
// (undefined_table) or 3F000 (invalid_schema_name).
func IsMissingTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}

// IsMissingTable implements txboxdriver.MissingTableClassifier with the
// package's IsMissingTable.
func (d *Driver) IsMissingTable(err error) bool { return IsMissingTable(err) }

var _ txboxdriver.MissingTableClassifier = (*Driver)(nil)

// IsRejected implements txboxdriver.RejectionClassifier: a COMMIT that pgx
// reports turned into a rollback (pgx.ErrTxCommitRollback: a statement of
// the transaction had failed and its error was ignored). The SQLSTATEs
// txboxdriver.IsRejected accepts apply as well.
func (d *Driver) IsRejected(err error) bool { return errors.Is(err, pgx.ErrTxCommitRollback) }

// UnwrapTx returns an Executor running inside tx.
func (d *Driver) UnwrapTx(tx pgx.Tx) txboxdriver.Executor { return txExec{tx} }

// BeginTx begins a transaction on the pool.
func (d *Driver) BeginTx(ctx context.Context) (pgx.Tx, txboxdriver.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	return tx, txExec{tx}, nil
}

// querier is what pgx's pool, conns and transactions have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func exec(ctx context.Context, q querier, sql string, args []any) (int64, error) {
	tag, err := q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func query(ctx context.Context, q querier, sql string, args []any) (txboxdriver.Rows, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{rows}, nil
}

type poolExec struct{ p *pgxpool.Pool }

func (p poolExec) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	return exec(ctx, p.p, sql, args)
}
func (p poolExec) Query(ctx context.Context, sql string, args ...any) (txboxdriver.Rows, error) {
	return query(ctx, p.p, sql, args)
}
func (p poolExec) Begin(ctx context.Context) (txboxdriver.Tx, error) {
	return p.BeginTx(ctx, txboxdriver.TxOptions{})
}

var _ txboxdriver.TxBeginner = poolExec{}

func (p poolExec) BeginTx(ctx context.Context, opts txboxdriver.TxOptions) (txboxdriver.Tx, error) {
	iso, err := isoLevel(opts.Isolation)
	if err != nil {
		return nil, err
	}
	tx, err := p.p.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	if err != nil {
		return nil, err
	}
	return txExec{tx}, nil
}

// isoLevel is l in pgx's terms ("" for txboxdriver.LevelDefault).
func isoLevel(l txboxdriver.IsolationLevel) (pgx.TxIsoLevel, error) {
	switch l {
	case txboxdriver.LevelDefault:
		return "", nil
	case txboxdriver.LevelReadCommitted:
		return pgx.ReadCommitted, nil
	case txboxdriver.LevelRepeatableRead:
		return pgx.RepeatableRead, nil
	case txboxdriver.LevelSerializable:
		return pgx.Serializable, nil
	}
	return "", fmt.Errorf("txboxpgx: unknown isolation level %d", l)
}

var _ txboxdriver.QueryBeginner = poolExec{}

// BeginQuery implements txboxdriver.QueryBeginner with a pgx batch: BEGIN, setup
// and query are sent together and answered together (pgx prepares each
// statement once per connection, in a round trip of its own the first
// time).
func (p poolExec) BeginQuery(ctx context.Context, opts txboxdriver.TxOptions, setup []txboxdriver.Statement, query txboxdriver.Statement) (txboxdriver.Tx, txboxdriver.Rows, error) {
	begin, err := beginSQL(opts)
	if err != nil {
		return nil, nil, err
	}
	conn, err := p.p.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	b := &pgx.Batch{}
	queueBegin(b, begin, setup, query)
	br := conn.SendBatch(ctx, b)
	tx := &connTx{conn: conn}
	rows, err := readBegin(ctx, br, tx, len(setup))
	if err != nil {
		return nil, nil, err
	}
	return tx, rows, nil
}

func beginSQL(opts txboxdriver.TxOptions) (string, error) {
	iso, err := isoLevel(opts.Isolation)
	if err != nil {
		return "", err
	}
	if iso != "" {
		return "begin isolation level " + string(iso), nil
	}
	return "begin", nil
}

// queueBegin queues BEGIN, the setup statements and the query.
func queueBegin(b *pgx.Batch, begin string, setup []txboxdriver.Statement, query txboxdriver.Statement) {
	b.Queue(begin)
	for _, s := range setup {
		b.Queue(s.SQL, s.Args...)
	}
	b.Queue(query.SQL, query.Args...)
}

// readBegin reads the answers to what queueBegin queued, tx being the
// transaction begun; on an error it ends tx.
func readBegin(ctx context.Context, br pgx.BatchResults, tx *connTx, setup int) (txboxdriver.Rows, error) {
	fail := func(err error) (txboxdriver.Rows, error) {
		_ = br.Close()
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, err
	}
	for range 1 + setup {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	return batchRows{rows, br}, nil
}

// batchRows are the rows of a batch's last query: closing them reads the
// rest of the batch's answer, which frees the connection.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r batchRows) Close() error {
	r.Rows.Close()
	err := r.br.Close()
	if rerr := r.Rows.Err(); rerr != nil {
		return rerr
	}
	return err
}

// connTx is a transaction on a pooled connection begun by BeginQuery; it
// gives the connection back when it ends (the pool closes a connection
// that is still in a transaction or broken instead of keeping it).
type connTx struct {
	conn *pgxpool.Conn // nil once ended
}

var _ txboxdriver.ExecCommitter = (*connTx)(nil)

func (t *connTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if t.conn == nil {
		return 0, pgx.ErrTxClosed
	}
	return exec(ctx, t.conn, sql, args)
}

func (t *connTx) Query(ctx context.Context, sql string, args ...any) (txboxdriver.Rows, error) {
	if t.conn == nil {
		return nil, pgx.ErrTxClosed
	}
	return query(ctx, t.conn, sql, args)
}

func (t *connTx) Commit(ctx context.Context) error {
	if t.conn == nil {
		return pgx.ErrTxClosed
	}
	tag, err := t.conn.Exec(ctx, "commit")
	t.end()
	return commitErr(tag, err)
}

// commitErr is pgx's reading of COMMIT's answer: a transaction that had
// failed answers ROLLBACK.
func commitErr(tag pgconn.CommandTag, err error) error {
	if err == nil && tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return err
}

func (t *connTx) Rollback(ctx context.Context) error {
	if t.conn == nil {
		return pgx.ErrTxClosed
	}
	_, err := t.conn.Exec(ctx, "rollback")
	t.end()
	return err
}

// ExecCommit implements txboxdriver.ExecCommitter: the statement and COMMIT in
// one batch. When the statement fails the server skips the COMMIT and the
// transaction stays open, failed, for Rollback.
func (t *connTx) ExecCommit(ctx context.Context, sql string, args ...any) (int64, error) {
	if t.conn == nil {
		return 0, pgx.ErrTxClosed
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue("commit")
	br := t.conn.SendBatch(ctx, b)
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return 0, err
	}
	ctag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	t.end()
	if err := commitErr(ctag, err); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return tag.RowsAffected(), nil
}

var _ txboxdriver.ChainBeginner = (*connTx)(nil)

// ExecCommitBeginQuery implements txboxdriver.ChainBeginner with one pgx batch:
// exec, COMMIT, BEGIN, setup and query. The server skips what follows a
// failed statement, so a claim never runs after marks that did not
// commit.
func (t *connTx) ExecCommitBeginQuery(ctx context.Context, exec txboxdriver.Statement, opts txboxdriver.TxOptions, setup []txboxdriver.Statement, query txboxdriver.Statement) (bool, txboxdriver.Tx, txboxdriver.Rows, error) {
	if t.conn == nil {
		return false, nil, nil, pgx.ErrTxClosed
	}
	begin, err := beginSQL(opts)
	if err != nil {
		return false, nil, nil, err
	}
	b := &pgx.Batch{}
	b.Queue(exec.SQL, exec.Args...)
	b.Queue("commit")
	queueBegin(b, begin, setup, query)
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return false, nil, nil, err
	}
	ctag, err := br.Exec()
	if err := commitErr(ctag, err); err != nil {
		_ = br.Close()
		return false, nil, nil, fmt.Errorf("commit: %w", err)
	}
	next := &connTx{conn: t.conn}
	t.conn = nil // the connection goes on in next
	rows, err := readBegin(ctx, br, next, len(setup))
	if err != nil {
		return true, nil, nil, err
	}
	return true, next, rows, nil
}

func (t *connTx) end() {
	t.conn.Release()
	t.conn = nil
}

type txExec struct{ tx pgx.Tx }

func (t txExec) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	return exec(ctx, t.tx, sql, args)
}
func (t txExec) Query(ctx context.Context, sql string, args ...any) (txboxdriver.Rows, error) {
	return query(ctx, t.tx, sql, args)
}
func (t txExec) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t txExec) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error { r.Rows.Close(); return nil }
