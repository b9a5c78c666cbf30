package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// Stats is the one read of a relay's state: before Start it says the
// relay does not run and has no good round (Ready names both) and counts
// the table's backlog; once the relay has delivered it is ready with the
// backlog gone; after Stop it no longer runs; and with its database gone
// it returns the error and the relay's own figures all the same.
func TestStatsReadsTheRelayWhole(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	f := sqlFixture(t, "sqlite", db, txboxdriver.SQLite)
	ctx := context.Background()
	f.add(t, true, txbox.Message{Topic: "t", Payload: []byte("1")}, txbox.Message{Topic: "t", Key: "k", Payload: []byte("2")})
	r := f.newRelay(t, nopPublisher{}, relay.Config{PollInterval: 10 * time.Millisecond})

	st, err := r.Stats(ctx)
	testenv.Must(t, err, "stats before start")
	if st.Running || st.Pending != 2 || st.Published != 0 || !st.LastGoodRound.IsZero() || st.At.IsZero() {
		t.Fatalf("before start: %+v", st)
	}
	if err := st.Ready(); err == nil || !strings.Contains(err.Error(), "not running") || !strings.Contains(err.Error(), "no round has succeeded") {
		t.Fatalf("Ready before start: %v", err)
	}

	testenv.Must(t, r.Start(ctx), "start")
	testenv.Await(t, "delivered and ready", func() (bool, string) {
		st, err := r.Stats(ctx)
		return err == nil && st.Published == 2 && st.Pending == 0 && st.Ready() == nil, fmt.Sprintf("%+v, ready: %v", st, st.Ready())
	})
	st, _ = r.Stats(ctx)
	if !st.Running || st.LastGoodRound.IsZero() || st.DatabaseErr != nil || !st.BrokerConnected {
		t.Fatalf("running: %+v", st)
	}
	testenv.Must(t, r.Stop(ctx), "stop")
	select {
	case <-r.Stopped():
	default:
		t.Fatal("Stopped is open after Stop")
	}
	if st, _ := r.Stats(ctx); st.Running || st.Ready() == nil {
		t.Fatalf("after stop: running %v, ready %v", st.Running, st.Ready())
	}

	testenv.Must(t, db.Close(), "close the database")
	st, err = r.Stats(ctx)
	if err == nil || st.DatabaseErr == nil || st.Published != 2 {
		t.Fatalf("with the database closed: err %v, %+v", err, st)
	}
	if err := st.Ready(); err == nil || !strings.Contains(err.Error(), "database unreachable") {
		t.Fatalf("Ready with the database closed: %v", err)
	}
}

// A Group has the relay's lifecycle: Stopped is closed before Start, a
// second Start is refused while it runs, and Stop leaves it stopped with no
// error.
func TestGroupLifecycle(t *testing.T) {
	t.Parallel()
	g, err := relay.NewGroup(relay.GroupConfig{})
	testenv.Must(t, err, "NewGroup")
	ctx := context.Background()
	select {
	case <-g.Stopped():
	default:
		t.Fatal("Stopped is open before Start")
	}
	testenv.Must(t, g.Start(ctx), "start")
	if err := g.Start(ctx); !errors.Is(err, relay.ErrAlreadyStarted) {
		t.Fatalf("second Start: %v, want ErrAlreadyStarted", err)
	}
	select {
	case <-g.Stopped():
		t.Fatal("Stopped is closed while the group runs")
	default:
	}
	testenv.Must(t, g.Stop(ctx), "stop")
	<-g.Stopped()
	if err := g.Err(); err != nil {
		t.Fatalf("Err after Stop: %v", err)
	}
	testenv.Must(t, g.Start(ctx), "start again")
	testenv.Must(t, g.Stop(ctx), "stop again")
}
