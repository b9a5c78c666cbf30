package migrate_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// cutProxy forwards TCP connections to PostgreSQL and closes a connection
// (both sides) when the client sends a message holding one of the
// patterns, the first cuts times: the server never answers that query,
// the client reads an unexpected EOF. It counts, so it is deterministic.
type cutProxy struct {
	ln       net.Listener
	target   string
	patterns [][]byte
	mu       sync.Mutex
	cuts     int
	done     int
}

func newCutProxy(t *testing.T, target string, cuts int, patterns ...string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	p := &cutProxy{ln: ln, target: target, cuts: cuts}
	for _, s := range patterns {
		p.patterns = append(p.patterns, []byte(s))
	}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

func (p *cutProxy) serve() {
	acceptPairs(p.ln, p.target, func(c, up net.Conn) {
		go func() { _, _ = io.Copy(c, up); _ = c.Close(); _ = up.Close() }()
		go func() {
			defer func() { _ = c.Close(); _ = up.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 && p.cut(buf[:n]) {
					return
				}
				if n > 0 {
					if _, werr := up.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	})
}

// acceptPairs accepts connections on ln until it is closed, dials target
// for each, and hands the two to pipe, which copies between them.
func acceptPairs(ln net.Listener, target string, pipe func(c, up net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pipe(c, up)
	}
}

// cut reports whether the connection that sent b is to be closed.
func (p *cutProxy) cut(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done >= p.cuts {
		return false
	}
	for _, pat := range p.patterns {
		if bytes.Contains(b, pat) {
			p.done++
			return true
		}
	}
	return false
}

// reset makes the proxy cut the next cuts matching messages.
func (p *cutProxy) reset(cuts int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts, p.done = cuts, 0
}

func (p *cutProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// A database cut during the relay's start-up check (the read of
// txbox_migrations, the read of the outbox table, the catalog and the
// probe) is retried, with a warning per try, and the relay starts: only a
// table that is missing or unmigrated is a StartupError. Each of the first
// three reads of the kinds named is cut.
func TestStartupCheckRetriesACutDatabase(t *testing.T) {
	t.Parallel()
	for _, pattern := range []string{"txbox_migrations", "WHERE 1 = 0", "pg_attribute", "txbox.probe"} {
		t.Run(pattern, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			direct, schema := testenv.Postgres(t, 2)
			m, err := txboxmigrate.New(txboxpgx.New(direct), txboxmigrate.Config{})
			testenv.Must(t, err, "txboxmigrate.New")
			_, err = m.Up(ctx)
			testenv.Must(t, err, "up")

			target := net.JoinHostPort(direct.Config().ConnConfig.Host, strconv.Itoa(int(direct.Config().ConnConfig.Port)))
			proxy := newCutProxy(t, target, 3, pattern)
			cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
			testenv.Must(t, err, "parse")
			host, port, _ := net.SplitHostPort(proxy.ln.Addr().String())
			p, _ := strconv.Atoi(port)
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
			cfg.ConnConfig.RuntimeParams["search_path"] = schema
			newPool := func() *pgxpool.Pool { // new connections: pgx sends a query's text once per connection
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				testenv.Must(t, err, "pool")
				t.Cleanup(func() { testenv.ClosePool(t, pool) })
				return pool
			}
			pool := newPool()

			// The consumer's check of its inbox table (consumer.Start runs
			// it) retries the same way.
			var inboxLogs testenv.Buffer
			mi, err := txboxmigrate.New(txboxpgx.New(direct), txboxmigrate.Config{NoOutbox: true, InboxTables: []string{"inbox"}})
			testenv.Must(t, err, "inbox migrator")
			_, err = mi.Up(ctx)
			testenv.Must(t, err, "inbox up")
			viaProxy := func(pool *pgxpool.Pool) *txboxmigrate.Migrator {
				m, err := txboxmigrate.New(txboxpgx.New(pool), txboxmigrate.Config{NoOutbox: true, InboxTables: []string{"inbox"},
					Logger: slog.New(slog.NewTextHandler(&inboxLogs, nil))})
				testenv.Must(t, err, "inbox migrator through the proxy")
				return m
			}

			var logs testenv.Buffer
			r, err := relay.New(txboxpgx.New(pool), &drivertest.Recorder{}, relay.Config{DisableNotify: true,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			testenv.Must(t, err, "relay")
			vctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a hang, not a speed
			defer cancel()
			if err := r.Validate(vctx); err != nil {
				t.Fatalf("start-up check with %d cut(s): %v\n%s", proxy.count(), err, logs.String())
			}
			if got := proxy.count(); got != 3 {
				t.Fatalf("%d cut(s), want 3: the check never read %q", got, pattern)
			}
			if n := strings.Count(logs.String(), "trying again"); n != 3 {
				t.Fatalf("%d retry warning(s) for 3 cuts:\n%s", n, logs.String())
			}
			t.Logf("first warning: %s", strings.SplitN(logs.String(), "\n", 2)[0])
			if pattern != "txbox.probe" { // an inbox table has no probe
				proxy.reset(3)
				if problems, _ := viaProxy(newPool()).Startup(vctx); len(problems) > 0 {
					t.Fatalf("inbox start-up check with %d cut(s): %v\n%s", proxy.count(), problems, inboxLogs.String())
				}
				if got, n := proxy.count(), strings.Count(inboxLogs.String(), "trying again"); got != 3 || n != 3 {
					t.Fatalf("inbox check: %d cut(s), %d retry warning(s); want 3 and 3:\n%s", got, n, inboxLogs.String())
				}
			}

			// A relay group retries each store on its own: its Add returns
			// the database's failure as it is, for the caller to retry,
			// not a StartupError that would leave the store out.
			proxy.reset(1)
			g := quietGroup(t)
			gr, err := relay.New(txboxpgx.New(newPool()), &drivertest.Recorder{}, relay.Config{DisableNotify: true})
			testenv.Must(t, err, "group relay")
			addRetried(t, vctx, g, gr, txboxdriver.IsTransient, "group Add with a cut database")
			testenv.Must(t, g.Add(vctx, relay.Store{Name: "s", Relay: gr}), "group Add once the database answers")

			// A table that is really missing still stops the relay.
			_, err = direct.Exec(ctx, "DROP TABLE txbox_outbox")
			testenv.Must(t, err, "drop")
			if err := r.Validate(vctx); err == nil || !strings.Contains(err.Error(), "is missing although its migrations are recorded") {
				t.Fatalf("start-up check on a dropped table: %v", err)
			}
		})
	}
}
