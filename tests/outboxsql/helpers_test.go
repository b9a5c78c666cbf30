package outboxsql_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// migrated applies every migration of drv's outbox table.
func migrated[TTx any](t testing.TB, drv txboxdriver.Driver[TTx]) {
	t.Helper()
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
}

// pgClaims returns a pool on a schema of the test's own with a migrated
// outbox table, its driver, and a Store claiming from that table.
func pgClaims(t *testing.T, conns int) (*pgxpool.Pool, *txboxpgx.Driver, *outboxsql.Store) {
	t.Helper()
	pool, _ := testenv.Postgres(t, conns)
	drv := txboxpgx.New(pool)
	migrated(t, drv)
	store, err := outboxsql.NewStore(txboxdriver.Postgres, drv.Pool(), `"txbox_outbox"`, time.Minute)
	testenv.Must(t, err, "store")
	return pool, drv, store
}
