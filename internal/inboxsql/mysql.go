package inboxsql

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/mysql.sql
var mysqlSQL string

// mysql is the inbox's SQL on MySQL and MariaDB: affected-row counts tell a
// fresh receipt (there is no RETURNING), the server's UTC clock stamps it,
// cutoffs are ages in microseconds.
type mysql struct {
	queries
	// foundReceipt tells an already processed receipt from a missing one
	// when mark_processed affects no row.
	foundReceipt string
	// sweepDelete deletes the receipts sweep locked: their keys follow.
	sweepDelete string
}

var _ Dialect = (*mysql)(nil)

// Receive runs the receipt's INSERT … ON DUPLICATE KEY UPDATE, whose
// duplicate path always changes the row: 1 row affected means inserted
// (fresh), 2 means updated (duplicate), whatever CLIENT_FOUND_ROWS says.
// Any other count (0: a driver that does not report it) is an error, never
// a guess that could skip a handler or run it twice.
func (m *mysql) Receive(ctx context.Context, ex txboxdriver.Executor, r Receipt) (bool, error) {
	n, err := ex.Exec(ctx, m.receiveQuery(r), r.Source, r.ID, r.Metadata)
	if err != nil {
		return false, err
	}
	switch n {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	return false, fmt.Errorf("the driver reported %d rows affected, want 1 (fresh) or 2 (duplicate)", n)
}

// MarkProcessed asks whether the receipt exists when the UPDATE affected no
// row: MySQL counts a row already processed as unaffected (unless
// CLIENT_FOUND_ROWS is set).
func (m *mysql) MarkProcessed(ctx context.Context, ex txboxdriver.Executor, source, id string, _ time.Time) (bool, error) {
	found, err := affected(ctx, ex, m.markProcessed, source, id)
	if err != nil || found {
		return found, err
	}
	return hasRow(ctx, ex, m.foundReceipt, source, id)
}

// Sweep locks the receipts it deletes first, skipping locked ones, in a
// READ COMMITTED transaction where the Pool offers one: a DELETE cannot
// skip locked rows. It then deletes them by key.
func (m *mysql) Sweep(ctx context.Context, pool txboxdriver.Pool, source string, _ time.Time, retention time.Duration, limit int) (_ int64, err error) {
	var tx txboxdriver.Tx
	if b, ok := pool.(txboxdriver.TxBeginner); ok {
		tx, err = b.BeginTx(ctx, txboxdriver.TxOptions{Isolation: txboxdriver.LevelReadCommitted})
	} else {
		tx, err = pool.Begin(ctx)
	}
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, m.sweep, retention.Microseconds(), 2*retention.Microseconds(), source, source, limit)
	if err != nil {
		return 0, err
	}
	var keys []any
	for rows.Next() {
		var src, id string
		if err := rows.Scan(&src, &id); err != nil {
			_ = rows.Close()
			return 0, err
		}
		keys = append(keys, src, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || len(keys) == 0 {
		return 0, err
	}
	var q strings.Builder
	q.WriteString(m.sweepDelete)
	q.WriteByte(' ')
	for i := 0; i < len(keys); i += 2 {
		if i > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(source = ? AND message_id = ?)")
	}
	n, err := tx.Exec(ctx, q.String(), keys...)
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

func (m *mysql) SweepCount(ctx context.Context, ex txboxdriver.Executor, source string, _ time.Time, retention time.Duration) (int64, error) {
	return count(ctx, ex, m.sweepCount, retention.Microseconds(), 2*retention.Microseconds(), source, source)
}
