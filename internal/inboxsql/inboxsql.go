// Package inboxsql holds the inbox's SQL for each dialect and the code that
// runs it. Each dialect is one type (postgres.go, sqlite.go, mysql.go) that
// owns its embedded SQL file, its arguments and how it reads a receipt's
// outcome; package inbox holds every step they share.
package inboxsql

import (
	"context"
	"fmt"
	"time"

	"github.com/txbox/txbox/internal/sqltext"
	"github.com/txbox/txbox/txboxdriver"
)

// Dialect is one dialect's inbox SQL on one table.
type Dialect interface {
	// Receive runs the insert-first receipt of r and reports whether it
	// inserted a row (the message is fresh).
	Receive(ctx context.Context, ex txboxdriver.Executor, r Receipt) (fresh bool, err error)
	// MarkProcessed marks the receipt of (source, id) processed and
	// reports whether there is one.
	MarkProcessed(ctx context.Context, ex txboxdriver.Executor, source, id string, now time.Time) (found bool, err error)
	// Exists reports whether a receipt of (source, id) is visible.
	Exists(ctx context.Context, ex txboxdriver.Executor, source, id string) (bool, error)
	// Stats returns, per source ordered by source, the source, its
	// receipts and its processed receipts.
	Stats(ctx context.Context, ex txboxdriver.Executor) (txboxdriver.Rows, error)
	// Sweep deletes up to limit receipts of source ("": every source)
	// past retention (twice retention for unprocessed ones), counted back
	// from now. It skips receipts another transaction has locked (a sweep
	// beside it, a handler's), so that sweeps never wait for each other.
	Sweep(ctx context.Context, pool txboxdriver.Pool, source string, now time.Time, retention time.Duration, limit int) (int64, error)
	// SweepCount counts the receipts Sweep would delete, without a limit.
	SweepCount(ctx context.Context, ex txboxdriver.Executor, source string, now time.Time, retention time.Duration) (int64, error)
	// Probe reads nothing from the table, failing if it is missing or
	// unreadable.
	Probe(ctx context.Context, ex txboxdriver.Executor) error
	// Savepoints of a batch: see savepoint.go.
	Savepoints
}

// Receipt is what Receive records.
type Receipt struct {
	Source, ID string
	Metadata   any // the JSON text, or nil
	Now        time.Time
	// Processed writes the receipt already processed (Handle's receipt,
	// which becomes visible only if the handler's transaction commits).
	Processed bool
}

// New returns the inbox SQL of dialect d for table in schema (both
// validated; schema may be empty).
func New(d txboxdriver.Dialect, schema, table string) (Dialect, error) {
	switch d {
	case txboxdriver.Postgres:
		p := &postgres{bulk: bulk{placeholder: dollar, args: func(r Receipt) []any { return []any{r.Source, r.ID, r.Metadata} }}}
		return p, p.load(d, postgresSQL, schema, table, p.bulk.dests())
	case txboxdriver.SQLite:
		s := &sqlite{bulk: bulk{placeholder: question, args: func(r Receipt) []any {
			now := r.Now.UnixMicro()
			return []any{r.Source, r.ID, now, now, r.Metadata}
		}}}
		return s, s.load(d, sqliteSQL, schema, table, s.bulk.dests())
	case txboxdriver.MySQL:
		m := &mysql{}
		return m, m.load(d, mysqlSQL, schema, table, map[string]*string{"found_receipt": &m.foundReceipt, "sweep_delete": &m.sweepDelete})
	}
	return nil, fmt.Errorf("dialect %q is not supported", d)
}

// queries are the inbox's statements, rendered for one table, and the
// methods whose arguments are the same in every dialect.
type queries struct {
	receive, receiveProcessed, markProcessed, exists, stats, sweep, sweepCount, probe string
	savepoints
}

func (q *queries) load(d txboxdriver.Dialect, file, schema, table string, extra map[string]*string) error {
	dest := map[string]*string{
		"receive": &q.receive, "receive_processed": &q.receiveProcessed, "mark_processed": &q.markProcessed,
		"exists": &q.exists, "stats": &q.stats, "sweep": &q.sweep, "sweep_count": &q.sweepCount, "probe": &q.probe,
	}
	funcs := sqltext.Names(d, schema, table)
	funcs["list"] = listFunc
	return sqltext.Load("inbox/"+string(d), file, funcs, dest, q.savepoints.dests(), extra)
}

// receiveQuery returns the receipt statement r asks for.
func (q *queries) receiveQuery(r Receipt) string {
	if r.Processed {
		return q.receiveProcessed
	}
	return q.receive
}

func (q *queries) Exists(ctx context.Context, ex txboxdriver.Executor, source, id string) (bool, error) {
	rows, err := ex.Query(ctx, q.exists, source, id)
	if err != nil {
		return false, err
	}
	return exists(rows)
}

func (q *queries) Stats(ctx context.Context, ex txboxdriver.Executor) (txboxdriver.Rows, error) {
	return ex.Query(ctx, q.stats)
}

func (q *queries) Probe(ctx context.Context, ex txboxdriver.Executor) error {
	rows, err := ex.Query(ctx, q.probe)
	if err != nil {
		return err
	}
	_, err = exists(rows)
	return err
}

// returning runs a receipt whose RETURNING clause returns a row only when
// it inserted one.
func hasRow(ctx context.Context, ex txboxdriver.Executor, q string, args ...any) (bool, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return false, err
	}
	return exists(rows)
}

// affected runs q and reports whether it affected a row.
func affected(ctx context.Context, ex txboxdriver.Executor, q string, args ...any) (bool, error) {
	n, err := ex.Exec(ctx, q, args...)
	return n > 0, err
}

// exists reports whether rows has a row, and closes rows. It reads the
// error after Close, where pgx reports a statement's late failures.
func exists(rows txboxdriver.Rows) (bool, error) {
	found := rows.Next()
	cerr := rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	return found, cerr
}

// count runs a query of one count.
func count(ctx context.Context, ex txboxdriver.Executor, q string, args ...any) (int64, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, err
		}
		return 0, txboxdriver.ErrNoRows
	}
	if err := rows.Scan(&n); err != nil {
		return 0, err
	}
	return n, rows.Err()
}
