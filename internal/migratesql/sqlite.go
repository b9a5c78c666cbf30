package migratesql

import (
	"context"
	_ "embed"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/sqlite.sql
var sqliteSQL string

// sqlite stores applied_at as RFC 3339 text and takes no lock: SQLite has
// one writer at a time.
type sqlite struct{ queries }

var _ Dialect = (*sqlite)(nil)

func (s *sqlite) Lock(context.Context, txboxdriver.Tx) (func(context.Context) error, error) {
	return noUnlock, nil
}

// LockTimeout does nothing: SQLite's writers wait for each other as the
// connection's busy timeout says.
func (s *sqlite) LockTimeout(context.Context, txboxdriver.Tx, time.Duration) (func(context.Context) error, error) {
	return noUnlock, nil
}

func (s *sqlite) LockTimedOut(error) bool { return false }

func (s *sqlite) Holders(context.Context, txboxdriver.Executor, string) (string, error) {
	return "", nil
}

func (s *sqlite) Record(ctx context.Context, ex txboxdriver.Executor, target string, version int, name string, at time.Time) error {
	_, err := ex.Exec(ctx, s.record, target, version, name, at.UTC().Format(time.RFC3339Nano))
	return err
}
