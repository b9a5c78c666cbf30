package inboxsql

import (
	"context"
	_ "embed"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/postgres.sql
var postgresSQL string

// postgres is the inbox's SQL on PostgreSQL: RETURNING tells a fresh
// receipt, the server's clock stamps it, cutoffs are times.
type postgres struct {
	queries
	bulk
}

var _ BulkReceiver = (*postgres)(nil)

var _ Dialect = (*postgres)(nil)

func (p *postgres) Receive(ctx context.Context, ex txboxdriver.Executor, r Receipt) (bool, error) {
	return hasRow(ctx, ex, p.receiveQuery(r), r.Source, r.ID, r.Metadata)
}

func (p *postgres) MarkProcessed(ctx context.Context, ex txboxdriver.Executor, source, id string, _ time.Time) (bool, error) {
	return affected(ctx, ex, p.markProcessed, source, id)
}

func (p *postgres) Sweep(ctx context.Context, ex txboxdriver.Pool, source string, now time.Time, retention time.Duration, limit int) (int64, error) {
	return ex.Exec(ctx, p.sweep, now.Add(-retention), now.Add(-2*retention), limit, source)
}

func (p *postgres) SweepCount(ctx context.Context, ex txboxdriver.Executor, source string, now time.Time, retention time.Duration) (int64, error) {
	return count(ctx, ex, p.sweepCount, now.Add(-retention), now.Add(-2*retention), source)
}
