package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// A relay on a database whose outbox table was never migrated does not
// start: Start returns a StartupError that names the table and the fix,
// each time it is asked, and Stopped stays closed.
func TestStartRefusesAnUnmigratedTable(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(t *testing.T) (txboxdriver.Driver[*sql.Tx], string){
		"sqlite": func(t *testing.T) (txboxdriver.Driver[*sql.Tx], string) {
			return txboxsql.New(testenv.SQLite(t), txboxdriver.SQLite), "txbox_outbox"
		},
		"mysql": func(t *testing.T) (txboxdriver.Driver[*sql.Tx], string) {
			return txboxsql.New(testenv.MySQL(t), txboxdriver.MySQL), "txbox_outbox"
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drv, table := mk(t)
			r, err := relay.New(drv, txbox.Publisher(nopPublisher{}), relay.Config{})
			testenv.Must(t, err, "relay.New")
			checkStartup(t, r, table)
		})
	}
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		pool, _ := testenv.Postgres(t, 4)
		r, err := relay.New(txboxpgx.New(pool), txbox.Publisher(nopPublisher{}), relay.Config{Table: "orders_outbox"})
		testenv.Must(t, err, "relay.New")
		checkStartup(t, r, "orders_outbox")
	})
}

func checkStartup(t *testing.T, r *relay.Relay, table string) {
	t.Helper()
	ctx := context.Background()
	for what, err := range map[string]error{"Start": r.Start(ctx), "Start again": r.Start(ctx)} {
		var se *txbox.StartupError
		if !errors.As(err, &se) || !errors.Is(err, txbox.ErrStartup) {
			t.Fatalf("%s on an unmigrated table: %v, want a *txbox.StartupError", what, err)
		}
		if msg := err.Error(); !strings.Contains(msg, table) || !strings.Contains(msg, "txbox migrate up") || se.Component != "relay" {
			t.Errorf("%s: %q does not name the table %s and the fix", what, msg, table)
		}
	}
	select {
	case <-r.Stopped():
	default:
		t.Fatal("Stopped is open on a relay that never started")
	}
}
