package outboxsql_test

import (
	"context"
	"testing"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/migrate"
	"github.com/txbox/txbox/tests/testenv"
)

// migrated applies every migration of drv's outbox table.
func migrated[TTx any](t testing.TB, drv driver.Driver[TTx]) {
	t.Helper()
	m, err := migrate.New(drv, migrate.Config{})
	testenv.Must(t, err, "migrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
}
