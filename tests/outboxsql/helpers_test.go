package outboxsql_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/migrate"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// migrated applies every migration of drv's outbox table.
func migrated[TTx any](t testing.TB, drv driver.Driver[TTx]) {
	t.Helper()
	m, err := migrate.New(drv, migrate.Config{})
	testenv.Must(t, err, "migrate.New")
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
	store, err := outboxsql.NewStore(driver.Postgres, drv.Pool(), `"txbox_outbox"`, time.Minute)
	testenv.Must(t, err, "store")
	return pool, drv, store
}
