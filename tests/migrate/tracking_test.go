package migrate_test

import (
	"context"
	"testing"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// A txbox_migrations table of another shape (another tool's, or one
// altered by hand) is an error to Status and Up, on every dialect: a
// missing column is not a missing table, and the migrator does not take
// it for a fresh database whose every migration is pending.
func TestForeignTrackingTable(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			x := toolTargets(t, d)
			table := "txbox_migrations"
			if d == txboxdriver.Postgres {
				_, err := x.db.ExecContext(ctx, "CREATE SCHEMA "+x.schema)
				testenv.Must(t, err, "schema")
				table = x.schema + "." + table
			}
			_, err := x.db.ExecContext(ctx, "CREATE TABLE "+table+" (id INTEGER)")
			testenv.Must(t, err, "a tracking table of another shape")
			m, err := txboxmigrate.New(txboxsql.New(x.db, d), txboxmigrate.Config{Schema: x.schema})
			testenv.Must(t, err, "txboxmigrate.New")
			if st, err := m.Status(ctx); err == nil {
				t.Fatalf("status on a tracking table of another shape: %d migrations, no error; want the read's error", len(st))
			}
			if applied, err := m.Up(ctx); err == nil {
				t.Fatalf("up on a tracking table of another shape: applied %d, no error", len(applied))
			}
		})
	}
}
