package inboxsql

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/txbox/txbox/driver"
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
}

var _ Dialect = (*mysql)(nil)

// Receive runs the receipt's INSERT … ON DUPLICATE KEY UPDATE, whose
// duplicate path always changes the row: 1 row affected means inserted
// (fresh), 2 means updated (duplicate), whatever CLIENT_FOUND_ROWS says.
// Any other count (0: a driver that does not report it) is an error, never
// a guess that could skip a handler or run it twice.
func (m *mysql) Receive(ctx context.Context, ex driver.Executor, r Receipt) (bool, error) {
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
func (m *mysql) MarkProcessed(ctx context.Context, ex driver.Executor, source, id string, _ time.Time) (bool, error) {
	found, err := affected(ctx, ex, m.markProcessed, source, id)
	if err != nil || found {
		return found, err
	}
	return hasRow(ctx, ex, m.foundReceipt, source, id)
}

func (m *mysql) Sweep(ctx context.Context, ex driver.Executor, source string, _ time.Time, retention time.Duration, limit int) (int64, error) {
	return ex.Exec(ctx, m.sweep, retention.Microseconds(), 2*retention.Microseconds(), source, source, limit)
}

func (m *mysql) SweepCount(ctx context.Context, ex driver.Executor, source string, _ time.Time, retention time.Duration) (int64, error) {
	return count(ctx, ex, m.sweepCount, retention.Microseconds(), 2*retention.Microseconds(), source, source)
}
