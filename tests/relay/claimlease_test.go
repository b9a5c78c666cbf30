package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"slices"
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

// headClaims watches the claim leases of the keyed rows' heads (A1, B1)
// on db: each distinct claim (token and its claimed_until, stamped by the
// database's clock) in the order they were seen. A hung relay's claim
// stands for a whole lease, so the watch misses none of those.
type headClaims struct {
	mu     sync.Mutex
	claims []headClaim
	polls  int
}

type headClaim struct {
	token string
	until int64 // unix µs
}

func watchHeadClaims(t *testing.T, db *sql.DB) *headClaims {
	h := &headClaims{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			rows, err := db.QueryContext(ctx, "SELECT DISTINCT claim_token, claimed_until FROM txbox_outbox WHERE claim_token IS NOT NULL AND id IN (SELECT min(id) FROM txbox_outbox GROUP BY ordering_key)")
			if err == nil {
				for rows.Next() {
					var c headClaim
					if rows.Scan(&c.token, &c.until) == nil {
						h.add(c)
					}
				}
				_ = rows.Close()
			}
			h.mu.Lock()
			h.polls++
			h.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return h
}

func (h *headClaims) add(c headClaim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range h.claims {
		if o == c {
			return
		}
	}
	h.claims = append(h.claims, c)
}

// seen returns the claims seen up to a poll that began after the call.
func (h *headClaims) seen(t *testing.T) []headClaim {
	h.mu.Lock()
	from := h.polls
	h.mu.Unlock()
	eventually(t, "a watch of the heads' claims", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.polls >= from+2
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]headClaim(nil), h.claims...)
}

// SQLite: relays killed back to back while they publish keyed rows. Each
// kill costs the rows one lease, counted from its own claim, and no more:
// a relay killed before the lease expired never held the rows and adds
// nothing (the rows keep the first lease, unchanged), and one that took
// them over after the expiry adds one lease, stamped at its claim. The
// database's lease stamps count the leases; the rows are delivered, in
// key order, only after the last one expired.
func TestKilledRelaysCostOneLeaseEachOnSQLite(t *testing.T) {
	t.Parallel()
	const publishTimeout = 500 * time.Millisecond
	cfg := relaytest.With(relay.Config{PollInterval: 10 * time.Millisecond, PublishTimeout: publishTimeout}, relaytest.Config{BackoffMax: 100 * time.Millisecond})
	lease := (publishTimeout + relay.ClaimLeaseMargin).Microseconds()
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
			db := testenv.SQLite(t)
			f := sqlFixture(t, "sqlite", db, txboxdriver.SQLite)
			f.add(t, true, keyedRows()...)
			heads := watchHeadClaims(t, db)
			// Each killed relay's claim is stamped between the times read
			// before it started and after it claimed: its lease ends
			// within one lease of those.
			var after []int64
			before := time.Now().UnixMicro()
			killedRelay(t, f, cfg)
			after = append(after, time.Now().UnixMicro())
			if c.takeover {
				killedRelay(t, f, cfg) // returns once it claimed: after the first lease
				after = append(after, time.Now().UnixMicro())
			} else {
				// It polls, finds the rows leased, and dies holding nothing.
				r2 := f.newRelay(t, newHungPublisher(), cfg)
				testenv.Must(t, r2.Start(context.Background()), "start")
				time.Sleep(100 * time.Millisecond)
				testenv.Must(t, r2.Stop(context.Background()), "stop")
			}
			hung := heads.seen(t)
			rec := &recordingPublisher{}
			r := f.newRelay(t, rec, cfg)
			startRelay(t, r)
			eventually(t, "the last relay delivers everything", func() bool { return pending(t, r) == 0 })
			checkKeyOrder(t, rec.payloads())

			// One lease a kill: the killed relays' claims, and no other,
			// held the heads before the last relay's.
			if len(hung) != c.leases {
				t.Fatalf("the heads went through %d leases before the last relay (%v), want %d", len(hung), hung, c.leases)
			}
			if all := heads.seen(t); len(all) > c.leases+1 || !slices.Equal(all[:c.leases], hung) {
				t.Fatalf("the heads' leases %v, want the killed relays' %v, then at most the last relay's", all, hung)
			}
			// Each lease is one lease from its claim, and a takeover
			// claims only after the lease before it expired.
			for i, h := range hung {
				from := before
				if i > 0 {
					from = hung[i-1].until
				}
				if h.until < from+lease || h.until > after[i]+lease {
					t.Errorf("lease %d ends at %d µs, want one lease (%d µs) after its claim, between %d and %d", i+1, h.until, lease, from+lease, after[i]+lease)
				}
			}
			// Delivered only once the last lease expired.
			var first int64
			if err := db.QueryRow("SELECT min(published_at) FROM txbox_outbox").Scan(&first); err != nil {
				t.Fatalf("published_at: %v", err)
			}
			if last := hung[len(hung)-1].until; first < last {
				t.Fatalf("first row published at %d µs, before the last lease expired at %d µs", first, last)
			}
		})
	}
}
