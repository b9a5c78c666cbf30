package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// hungPublisher is the publisher of a relay that hangs (or was killed)
// while it publishes: its first call signals started and returns only when
// the test ends (see hang), whatever its context says, so its relay never
// touches its claim again.
type hungPublisher struct {
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func newHungPublisher() *hungPublisher {
	return &hungPublisher{started: make(chan struct{}), release: make(chan struct{})}
}

// startHung starts r, whose publisher is p, and lets p return when the test
// ends, before r is stopped.
func startHung(t *testing.T, r *relay.Relay, p *hungPublisher) {
	startRelay(t, r)
	t.Cleanup(func() { close(p.release) })
}

func (p *hungPublisher) Publish(_ context.Context, msgs []txbox.Message) []error {
	p.once.Do(func() { close(p.started) })
	<-p.release
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = errors.New("hung relay: never published")
	}
	return errs
}

// recordingPublisher records the payloads it is given, in order.
type recordingPublisher struct {
	mu  sync.Mutex
	got []string
}

func (p *recordingPublisher) Publish(_ context.Context, msgs []txbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.got = append(p.got, string(m.Payload))
	}
	return make([]error, len(msgs))
}

func (p *recordingPublisher) payloads() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

// keyedRows are two keys of three messages each: a relay's claim takes
// only the heads (A1, B1), and the rest waits behind them.
func keyedRows() []txbox.Message {
	var msgs []txbox.Message
	for i := 1; i <= 3; i++ {
		for _, k := range []string{"A", "B"} {
			msgs = append(msgs, txbox.Message{Topic: "t", Key: k, Payload: []byte(k + strconv.Itoa(i))})
		}
	}
	return msgs
}

func checkKeyOrder(t *testing.T, payloads []string) {
	t.Helper()
	got := keyOrder(payloads)
	if got["A"] != "123" || got["B"] != "123" {
		t.Fatalf("delivered %v: per key %v, want A and B each 1, 2, 3 once", payloads, got)
	}
}

// A relay on PostgreSQL claims keyed rows through a proxy, then hangs in
// its publish while the proxy drops the relay's side of the connection
// only: the server keeps an idle session in the claim transaction, holding
// the rows' locks, and no TCP keepalive can end it (the proxy answers for
// the relay). The claim transaction's idle timeout (the claim lease,
// PublishTimeout + 5s) ends it, and a relay connected directly delivers
// every row, in key order, about one lease after the claim instead of never.
func TestHalfClosedRelayFreesItsClaimOnPostgres(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"pgx", "sql_postgres"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := pgxFixture(t, 4)
			schema := f.schema(t)
			f.add(t, true, keyedRows()...)

			cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
			testenv.Must(t, err, "parse url")
			proxy := testenv.NewHalfCloseProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
			host, port, _ := net.SplitHostPort(proxy.Addr())
			p, _ := strconv.Atoi(port)
			cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
			cfg.ConnConfig.RuntimeParams["search_path"] = schema
			app := "txbox_halfclosed_" + schema
			cfg.ConnConfig.RuntimeParams["application_name"] = app
			cfg.MaxConns = 2
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			testenv.Must(t, err, "proxied pool")
			t.Cleanup(func() { testenv.ClosePool(t, pool) })

			const publishTimeout = 2 * time.Second
			rcfg := relaytest.With(relay.Config{PollInterval: 10 * time.Millisecond, PublishTimeout: publishTimeout, DisableNotify: true}, relaytest.Config{BackoffMax: 100 * time.Millisecond})
			hung := newHungPublisher()
			var a *relay.Relay
			if name == "pgx" {
				a, err = relay.New[pgx.Tx](txboxpgx.New(pool), hung, rcfg)
			} else {
				db := stdlib.OpenDBFromPool(pool)
				t.Cleanup(func() { _ = db.Close() })
				a, err = relay.New[*sql.Tx](txboxsql.New(db, txboxdriver.Postgres), hung, rcfg)
			}
			testenv.Must(t, err, "relay.New through the proxy")
			lease := publishTimeout + relay.ClaimLeaseMargin
			startHung(t, a, hung)
			<-hung.started
			proxy.DropClientSide()
			cut := time.Now()

			ctx := context.Background()
			idleInTx := func() int64 {
				var n int64
				testenv.Must(t, f.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'", app).Scan(&n), "pg_stat_activity")
				return n
			}
			if n := idleInTx(); n != 1 {
				t.Fatalf("%d sessions of the proxied relay idle in transaction after the drop, want its claim's 1", n)
			}

			rec := &recordingPublisher{}
			b := f.newRelay(t, rec, relay.Config{PollInterval: 10 * time.Millisecond, PublishTimeout: publishTimeout})
			startRelay(t, b)
			eventually(t, "the direct relay delivers the half-closed relay's rows", func() bool { return pending(t, b) == 0 })
			waited := time.Since(cut)
			t.Logf("%s: rows of the half-closed relay delivered %s after its side was dropped (claim lease %s)", name, waited.Round(time.Millisecond), lease)
			checkKeyOrder(t, rec.payloads())
			if n := idleInTx(); n != 0 {
				t.Errorf("%d sessions of the proxied relay still idle in transaction", n)
			}
			// The claim held its locks (B waited) and the server ended it
			// near the lease, not hours later. Generous: shared CI cores.
			if waited < publishTimeout || waited > lease+20*time.Second {
				t.Fatalf("delivered %s after the drop, want between %s and the lease %s + 20s", waited, publishTimeout, lease)
			}
		})
	}
}

// killedRelay starts a relay on f whose first publish hangs for good, as a
// relay killed while it publishes, and returns once it has claimed.
func killedRelay(t *testing.T, f fixture, cfg relay.Config) *relay.Relay {
	hung := newHungPublisher()
	r := f.newRelay(t, hung, cfg)
	startHung(t, r, hung)
	<-hung.started
	return r
}

// SQLite: relays killed back to back while they publish keyed rows. Each
// kill costs the rows one lease, counted from its own claim, and no more:
// a relay killed before the lease expired never held the rows and adds
// nothing, and one that took them over after the expiry adds one lease.
func TestKilledRelaysCostOneLeaseEachOnSQLite(t *testing.T) {
	t.Parallel()
	const publishTimeout = 500 * time.Millisecond
	cfg := relaytest.With(relay.Config{PollInterval: 10 * time.Millisecond, PublishTimeout: publishTimeout}, relaytest.Config{BackoffMax: 100 * time.Millisecond})
	lease := publishTimeout + relay.ClaimLeaseMargin
	for _, c := range []struct {
		name string
		// takeover: the second relay is killed once it has taken the
		// rows over (after the first lease), not right after its start.
		takeover bool
		leases   int
	}{
		{"second killed at once", false, 1},
		{"second killed after taking over", true, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := sqlFixture(t, "sqlite", testenv.SQLite(t), txboxdriver.SQLite)
			f.add(t, true, keyedRows()...)
			start := time.Now()
			killedRelay(t, f, cfg)
			if c.takeover {
				killedRelay(t, f, cfg) // returns once it claimed: after the first lease
			} else {
				// It polls, finds the rows leased, and dies holding nothing.
				r2 := f.newRelay(t, newHungPublisher(), cfg)
				testenv.Must(t, r2.Start(context.Background()), "start")
				time.Sleep(100 * time.Millisecond)
				testenv.Must(t, r2.Stop(context.Background()), "stop")
			}
			rec := &recordingPublisher{}
			r := f.newRelay(t, rec, cfg)
			startRelay(t, r)
			eventually(t, "the last relay delivers everything", func() bool { return pending(t, r) == 0 })
			waited := time.Since(start)
			t.Logf("%s: delivered %s after the first claim (lease %s)", c.name, waited.Round(time.Millisecond), lease)
			checkKeyOrder(t, rec.payloads())
			want := time.Duration(c.leases) * lease
			// The lease is stamped from the claiming relay's clock just
			// before start is read here: allow for that skew.
			if waited < want-500*time.Millisecond || waited > want+10*time.Second {
				t.Fatalf("delivered %s after the first claim, want %d lease(s) of %s (+ up to 10s)", waited, c.leases, lease)
			}
		})
	}
}
