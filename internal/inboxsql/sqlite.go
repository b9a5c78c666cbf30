package inboxsql

import (
	"context"
	_ "embed"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/sqlite.sql
var sqliteSQL string

// sqlite is the inbox's SQL on SQLite: RETURNING tells a fresh receipt,
// times are Unix microseconds computed here.
type sqlite struct {
	queries
	bulk
}

var _ BulkReceiver = (*sqlite)(nil)

var _ Dialect = (*sqlite)(nil)

func (s *sqlite) Receive(ctx context.Context, ex txboxdriver.Executor, r Receipt) (bool, error) {
	return hasRow(ctx, ex, s.receiveQuery(r), r.Source, r.ID, r.Now.UnixMicro(), r.Metadata)
}

func (s *sqlite) MarkProcessed(ctx context.Context, ex txboxdriver.Executor, source, id string, now time.Time) (bool, error) {
	return affected(ctx, ex, s.markProcessed, source, id, now.UnixMicro())
}

func (s *sqlite) Sweep(ctx context.Context, ex txboxdriver.Pool, source string, now time.Time, retention time.Duration, limit int) (int64, error) {
	return ex.Exec(ctx, s.sweep, now.Add(-retention).UnixMicro(), now.Add(-2*retention).UnixMicro(), limit, source)
}

func (s *sqlite) SweepCount(ctx context.Context, ex txboxdriver.Executor, source string, now time.Time, retention time.Duration) (int64, error) {
	return count(ctx, ex, s.sweepCount, now.Add(-retention).UnixMicro(), now.Add(-2*retention).UnixMicro(), source)
}
