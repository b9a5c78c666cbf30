package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// tenant is one outbox table of a group test: a schema of the test
// database, or a SQLite or MySQL database of its own.
type tenant struct {
	name  string
	topic string
	table string // the qualified outbox table
	// add commits n messages on the tenant's topic in one transaction and
	// returns their ids.
	add      func(t testing.TB, n int) []string
	newRelay func(t testing.TB, pub txbox.Publisher, cfg relay.Config) *relay.Relay
	// pending counts the rows not yet delivered.
	pending func(t testing.TB) int64
	exec    func(t testing.TB, q string)
}

func msgs(topic string, n int) []txbox.Message {
	out := make([]txbox.Message, n)
	for i := range out {
		out[i] = txbox.Message{Topic: topic, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return out
}

// pgGroup makes n tenants in schemas of one database, reached through a
// pool of conns connections, a JetStream stream that captures their topics,
// and a publisher to it.
func pgGroup(t *testing.T, conns, n int) ([]tenant, txbox.Publisher, jetstream.Stream) {
	t.Helper()
	pool, _ := testenv.Postgres(t, conns)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	return pgTenants(t, pool, prefix, n), publisher(t, nc), s
}

// pgTenants makes n schemas in pool's database, each with a migrated
// outbox table, dropped when the test ends.
func pgTenants(t testing.TB, pool *pgxpool.Pool, prefix string, n int) []tenant {
	t.Helper()
	ctx := context.Background()
	drv := txboxpgx.New(pool)
	out := make([]tenant, n)
	for i := range out {
		schema := testenv.Name("tn")
		m, err := txboxmigrate.New(drv, txboxmigrate.Config{Schema: schema})
		testenv.Must(t, err, "txboxmigrate.New")
		_, err = m.Up(ctx)
		testenv.Must(t, err, "migrate up %s", schema)
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
		ob, err := txbox.New(drv, txbox.Config{Schema: schema})
		testenv.Must(t, err, "txbox.New")
		name := fmt.Sprintf("pg%02d", i)
		topic := prefix + name
		out[i] = tenant{
			name: name, topic: topic, table: schema + ".txbox_outbox",
			add: func(t testing.TB, n int) []string {
				tx, err := pool.Begin(ctx)
				testenv.Must(t, err, "begin")
				ids, err := ob.Add(ctx, tx, msgs(topic, n)...)
				testenv.Must(t, err, "add")
				testenv.Must(t, tx.Commit(ctx), "commit")
				return ids
			},
			newRelay: func(t testing.TB, pub txbox.Publisher, cfg relay.Config) *relay.Relay {
				r, err := relay.New[pgx.Tx](ob, pub, cfg)
				testenv.Must(t, err, "relay.New")
				return r
			},
			pending: func(t testing.TB) int64 {
				var n int64
				testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".txbox_outbox WHERE published_at IS NULL").Scan(&n), "count")
				return n
			},
			exec: func(t testing.TB, q string) {
				_, err := pool.Exec(ctx, fmt.Sprintf(q, schema+".txbox_outbox"))
				testenv.Must(t, err, "exec %s", q)
			},
		}
	}
	return out
}

// sqlTenant is a tenant on its own SQLite or MySQL database.
func sqlTenant(t testing.TB, name, topic string, db *sql.DB, d txboxdriver.Dialect) tenant {
	t.Helper()
	ctx := context.Background()
	drv := txboxsql.New(db, d)
	migrateUp(t, drv)
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	return tenant{
		name: name, topic: topic, table: "txbox_outbox",
		add: func(t testing.TB, n int) []string {
			tx, err := db.BeginTx(ctx, nil)
			testenv.Must(t, err, "begin")
			ids, err := ob.Add(ctx, tx, msgs(topic, n)...)
			testenv.Must(t, err, "add")
			testenv.Must(t, tx.Commit(), "commit")
			return ids
		},
		newRelay: func(t testing.TB, pub txbox.Publisher, cfg relay.Config) *relay.Relay {
			r, err := relay.New[*sql.Tx](ob, pub, cfg)
			testenv.Must(t, err, "relay.New")
			return r
		},
		pending: func(t testing.TB) int64 {
			var n int64
			testenv.Must(t, db.QueryRowContext(ctx, "SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL").Scan(&n), "count")
			return n
		},
		exec: func(t testing.TB, q string) {
			_, err := db.ExecContext(ctx, fmt.Sprintf(q, "txbox_outbox"))
			testenv.Must(t, err, "exec %s", q)
		},
	}
}

// events records a group's events in order.
type events struct {
	mu  sync.Mutex
	all []relay.GroupEvent
}

func (e *events) on(ev relay.GroupEvent) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) snapshot() []relay.GroupEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]relay.GroupEvent(nil), e.all...)
}

// count counts the events of kind for store ("" any) that match ok (nil any).
func (e *events) count(kind relay.GroupEventKind, store string, ok func(relay.GroupEvent) bool) int {
	n := 0
	for _, ev := range e.snapshot() {
		if ev.Kind == kind && (store == "" || ev.Store == store) && (ok == nil || ok(ev)) {
			n++
		}
	}
	return n
}

// runGroup runs g until the test ends, and fails the test if it stops by
// itself or does not start.
func runGroup(t *testing.T, g *relay.Group) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runUntilStopped(ctx, g) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("group run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("group did not stop")
		}
	})
}

// lifecycle is what Relay and Group share: Start, Stopped, Err.
type lifecycle interface {
	Start(ctx context.Context) error
	Stopped() <-chan struct{}
	Err() error
}

// runUntilStopped starts l and waits until it stops, by ctx or by itself,
// and returns Start's error or Err.
func runUntilStopped(ctx context.Context, l lifecycle) error {
	if err := l.Start(ctx); err != nil {
		return err
	}
	<-l.Stopped()
	return l.Err()
}
