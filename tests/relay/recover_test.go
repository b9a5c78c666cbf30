package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/natsembed"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
)

// logLine is one record a logLines handler kept.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logLines is a slog.Handler that keeps every record, at every level, with
// its attributes (those given to With included) as text.
type logLines struct {
	mu    *sync.Mutex
	lines *[]logLine
	with  []slog.Attr
}

func newLogLines() logLines { return logLines{mu: &sync.Mutex{}, lines: &[]logLine{}} }

func (h logLines) logger() *slog.Logger                     { return slog.New(h) }
func (h logLines) Enabled(context.Context, slog.Level) bool { return true }
func (h logLines) WithGroup(string) slog.Handler            { return h }
func (h logLines) WithAttrs(as []slog.Attr) slog.Handler {
	h.with = append(append([]slog.Attr(nil), h.with...), as...)
	return h
}

func (h logLines) Handle(_ context.Context, r slog.Record) error {
	l := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.with {
		l.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, l)
	h.mu.Unlock()
	return nil
}

// matching returns the lines at level or above whose message contains
// msg ("" any) and whose attributes include attrs (key, value pairs).
func (h logLines) matching(level slog.Level, msg string, attrs ...string) []logLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logLine
next:
	for _, l := range *h.lines {
		if l.level < level || !strings.Contains(l.msg, msg) {
			continue
		}
		for i := 0; i+1 < len(attrs); i += 2 {
			if l.attrs[attrs[i]] != attrs[i+1] {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// The lines that say a run of failed rounds started, reminded of it, and
// ended.
const (
	outageStarted  = "txbox relay: rounds are failing"
	outageReminder = "txbox relay: rounds are still failing"
	outageEnded    = "txbox relay: rounds succeed again"
)

// checkOutageLogged fails t unless logs (of one relay or store, attrs
// selecting it) said the outage in few lines: one warning when it started,
// at most one reminder a minute of the outage (lasted), one info line when
// it ended, which resumedBy ended ("" any); no other warning. It returns
// the end line.
func checkOutageLogged(t *testing.T, logs logLines, lasted time.Duration, resumedBy string, attrs ...string) logLine {
	t.Helper()
	// The line follows the round's marks, which the caller saw commit.
	eventually(t, "the outage's end logged", func() bool { return len(logs.matching(slog.LevelInfo, outageEnded, attrs...)) > 0 })
	// The lane lease heartbeat logs its own outage (at most a start and a
	// reminder a minute): TestLaneRelayLogsADatabaseOutageInFewLines.
	var warns []logLine
	beats := 0
	for _, l := range logs.matching(slog.LevelWarn, "", attrs...) {
		if strings.HasPrefix(l.msg, "txbox relay: lane lease heartbeat") {
			beats++
			continue
		}
		warns = append(warns, l)
	}
	started := logs.matching(slog.LevelWarn, outageStarted, attrs...)
	reminders := logs.matching(slog.LevelWarn, outageReminder, attrs...)
	ended := logs.matching(slog.LevelInfo, outageEnded, attrs...)
	var msgs []string
	for _, l := range warns {
		msgs = append(msgs, l.msg)
	}
	if beats > 1+int(lasted/time.Minute) {
		t.Fatalf("outage of %s: %d heartbeat warnings, want at most one and a reminder a minute", lasted.Round(time.Millisecond), beats)
	}
	if len(started) != 1 || len(ended) != 1 || len(reminders) > int(lasted/time.Minute) || len(warns) != len(started)+len(reminders) {
		t.Fatalf("outage of %s logged %d warnings (%d starts, %d reminders) and %d ends, want 1 start, at most one reminder a minute, 1 end; warnings: %q",
			lasted.Round(time.Millisecond), len(warns), len(started), len(reminders), len(ended), msgs)
	}
	end := ended[0]
	if resumedBy != "" && end.attrs["resumed_by"] != resumedBy {
		t.Fatalf("the outage ended by %q, want %q: %v", end.attrs["resumed_by"], resumedBy, end.attrs)
	}
	return end
}

// waitFailedRounds waits until failed() reaches n and returns at once
// (polled every millisecond): the caller acts right after the n-th
// failure, a whole backoff before the next round.
func waitFailedRounds(t *testing.T, n int64, failed func() int64) {
	t.Helper()
	last, lastAt := failed(), time.Now()
	for {
		f := failed()
		if f >= n {
			return
		}
		if f != last {
			last, lastAt = f, time.Now()
		}
		// Progress-bounded: the next failure is due a backoff (at most
		// 2^n × 100 ms) after the last.
		if time.Since(lastAt) > time.Minute+(100*time.Millisecond)<<n {
			t.Fatalf("failed rounds stuck at %d of %d", f, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// backoffAfter is the relay's backoff after n failed rounds in a row:
// 100 ms doubling, capped at max.
func backoffAfter(n int, max time.Duration) time.Duration {
	return min((100*time.Millisecond)<<(n-1), max)
}

// A JetStream stream that is full (MaxMsgs with DiscardNew) refuses every
// publish while the broker stays connected, so the relay's rounds fail and
// its backoff grows. Once the stream is purged, the relay resumes through
// its probe, well inside the backoff it had scheduled: the resume time and
// the backoff are printed side by side, and the test asserts that the
// probe, not the end of the backoff, ended the wait.
func TestRelayResumesSoonAfterAFullStreamIsPurged(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mk   func(t *testing.T) fixture
	}{
		{"pgx", func(t *testing.T) fixture { return pgxFixture(t, 8) }},
		{"sqlite", func(t *testing.T) fixture { return sqlFixture(t, "sqlite", testenv.SQLite(t), txboxdriver.SQLite) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := c.mk(t)
			srv := testenv.EmbeddedNATS(t)
			nc, err := srv.Connect()
			testenv.Must(t, err, "connect")
			defer nc.Close()
			prefix := testenv.Subject()
			const room = 3
			s := stream(t, nc, prefix, jetstream.StreamConfig{MaxMsgs: room, Discard: jetstream.DiscardNew})
			logs := newLogLines()
			r := f.newRelay(t, publisher(t, nc), relay.Config{PollInterval: 20 * time.Millisecond, Logger: logs.logger()})
			startRelay(t, r)
			for i := range room {
				f.add(t, true, txbox.Message{Topic: prefix + "fill", Payload: []byte(fmt.Sprint(i))})
			}
			eventually(t, "the stream filled", func() bool { return testenv.RelayStats(r).Published == room })
			for i := range room {
				f.add(t, true, txbox.Message{Topic: prefix + "after", Payload: []byte(fmt.Sprint(i))})
			}

			const failures = 7 // the next full round is 6.4 s away
			waitFailedRounds(t, failures, func() int64 { return testenv.RelayStats(r).FailedRounds })
			testenv.Must(t, s.Purge(context.Background()), "purge")
			purged := time.Now()
			before := testenv.RelayStats(r)
			eventually(t, "a delivery after the purge", func() bool { return testenv.RelayStats(r).Published > room })
			resumed := time.Since(purged)
			eventually(t, "everything delivered after the purge", func() bool { return pending(t, r) == 0 })
			st := testenv.RelayStats(r)
			scheduled := backoffAfter(failures, relaytest.DefaultBackoffMax)
			t.Logf("%s: stream full for %d failed rounds (%d probes); purge → first delivery %s, backoff scheduled %s (%.2f× of it); rounds failed after the purge: %d",
				c.name, before.FailedRounds, before.Probes, resumed.Round(time.Millisecond), scheduled, float64(resumed)/float64(scheduled), st.FailedRounds-before.FailedRounds)
			end := checkOutageLogged(t, logs, time.Since(purged), "probe")
			t.Logf("%s: end of the outage logged as %v", c.name, end.attrs)
			if st.Rejected != 0 || st.Published != 2*room {
				t.Fatalf("after the purge: %+v, want %d published and no rejections", st, 2*room)
			}
		})
	}
}

// A broker outage of many failed rounds (a 20 ms BackoffMax: a round
// every few milliseconds) is logged in three lines, not one warning a
// round: it started, it ended (after how long, how many rounds), and a
// reminder at most once a minute; each round's failure goes to debug.
func TestRelayLogsABrokerOutageInFewLines(t *testing.T) {
	t.Parallel()
	f := sqlFixture(t, "sqlite", testenv.SQLite(t), txboxdriver.SQLite)
	dir := t.TempDir()
	srv, err := natsembed.Start(natsembed.Config{Dir: dir})
	testenv.Must(t, err, "start nats")
	port := srv.Port()
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	testenv.Must(t, err, "connect")
	defer nc.Close()
	prefix := testenv.Subject()
	stream(t, nc, prefix, jetstream.StreamConfig{})
	logs := newLogLines()
	r := f.newRelay(t, publisher(t, nc), relaytest.With(relay.Config{PollInterval: 10 * time.Millisecond, Logger: logs.logger()}, relaytest.Config{BackoffMax: 20 * time.Millisecond}))
	startRelay(t, r)
	f.add(t, true, txbox.Message{Topic: prefix + "before", Payload: []byte("0")})
	eventually(t, "first message delivered", func() bool { return testenv.RelayStats(r).Published == 1 })

	srv.Shutdown()
	down := time.Now()
	f.add(t, true, txbox.Message{Topic: prefix + "during", Payload: []byte("1")})
	const rounds = 60
	waitFailedRounds(t, rounds, func() int64 { return testenv.RelayStats(r).FailedRounds })
	srv, err = natsembed.Start(natsembed.Config{Dir: dir, Port: port})
	testenv.Must(t, err, "restart nats")
	defer srv.Shutdown()
	eventually(t, "delivered after the restart", func() bool { return pending(t, r) == 0 })
	lasted := time.Since(down)
	end := checkOutageLogged(t, logs, lasted, "")
	debug := len(logs.matching(slog.LevelDebug, "txbox relay: round failed"))
	t.Logf("broker down %s, %d failed rounds: %d debug lines of failed rounds; end line %v",
		lasted.Round(time.Millisecond), testenv.RelayStats(r).FailedRounds, debug, end.attrs)
	if n, _ := strconv.Atoi(end.attrs["rounds_failed"]); n < rounds {
		t.Fatalf("end line says %s rounds failed, want at least %d", end.attrs["rounds_failed"], rounds)
	}
}

// proxiedTenant is a tenant of pool's database whose relay reaches it
// through a proxy that the test can cut, while the test writes to it
// directly.
func proxiedTenant(t *testing.T, pool *pgxpool.Pool, prefix string) (tenant, *testenv.Proxy, *pgxpool.Pool) {
	t.Helper()
	tn := pgTenants(t, pool, prefix, 1)[0]
	schema := strings.TrimSuffix(tn.table, ".txbox_outbox")
	proxied, proxy, _ := testenv.PostgresThrough(t, 4)
	tn.newRelay = func(t testing.TB, pub txbox.Publisher, cfg relay.Config) *relay.Relay {
		cfg.Schema = schema
		r, err := relay.New[pgx.Tx](txboxpgx.New(proxied), pub, cfg)
		testenv.Must(t, err, "relay.New")
		return r
	}
	return tn, proxy, proxied
}

// A relay whose database is cut (a proxy closes its connections and
// refuses new ones) for many rounds logs the outage in few lines.
func TestRelayLogsADatabaseOutageInFewLines(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 4)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	stream(t, nc, prefix, jetstream.StreamConfig{})
	tn, proxy, _ := proxiedTenant(t, pool, prefix)
	logs := newLogLines()
	r := tn.newRelay(t, publisher(t, nc), relaytest.With(relay.Config{PollInterval: 10 * time.Millisecond, DisableNotify: true, Logger: logs.logger()}, relaytest.Config{BackoffMax: 20 * time.Millisecond}))
	startRelay(t, r)
	tn.add(t, 1)
	eventually(t, "first message delivered", func() bool { return tn.pending(t) == 0 })

	proxy.Cut()
	down := time.Now()
	tn.add(t, 1)
	const rounds = 60
	waitFailedRounds(t, rounds, func() int64 { return testenv.RelayStats(r).FailedRounds })
	proxy.Resume()
	eventually(t, "delivered after the database returned", func() bool { return tn.pending(t) == 0 })
	lasted := time.Since(down)
	end := checkOutageLogged(t, logs, lasted, "")
	t.Logf("database cut %s, %d failed rounds: end line %v", lasted.Round(time.Millisecond), testenv.RelayStats(r).FailedRounds, end.attrs)
}

// A tenant of a Group whose database is cut until its backoff is large
// resumes through its probe soon after the database answers again, well
// inside the backoff it had scheduled (printed side by side), while the
// other tenant delivers throughout; the outage is logged in few lines,
// with the tenant's name.
func TestGroupTenantResumesSoonAfterItsDatabaseReturns(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	stream(t, nc, prefix, jetstream.StreamConfig{})
	pub := publisher(t, nc)
	ok := pgTenants(t, pool, prefix+"ok", 1)[0]
	down, proxy, _ := proxiedTenant(t, pool, prefix+"down")
	ok.name, down.name = "ok", "down"

	logs := newLogLines()
	g, err := relay.NewGroup(relay.GroupConfig{Logger: logs.logger(), DisableNotify: true})
	testenv.Must(t, err, "NewGroup")
	cfg := relay.Config{PollInterval: 20 * time.Millisecond, Logger: logs.logger(), DisableNotify: true}
	for _, x := range []tenant{ok, down} {
		testenv.Must(t, g.Add(context.Background(), relay.Store{Name: x.name, Relay: x.newRelay(t, pub, cfg)}), "add %s", x.name)
	}
	runGroup(t, g)
	down.add(t, 1)
	eventually(t, "down delivers before the cut", func() bool { return down.pending(t) == 0 })

	proxy.Cut()
	cut := time.Now()
	down.add(t, 1)
	r, _ := g.Relay("down")
	const failures = 7 // the next full round is 6.4 s away
	waitFailedRounds(t, failures, func() int64 { return testenv.RelayStats(r).FailedRounds })
	ok.add(t, 5)
	eventually(t, "ok delivers while down's database is cut", func() bool { return ok.pending(t) == 0 })
	waitFailedRounds(t, testenv.RelayStats(r).FailedRounds+1, func() int64 { return testenv.RelayStats(r).FailedRounds })
	proxy.Resume()
	back := time.Now()
	before := testenv.RelayStats(r)
	eventually(t, "down delivers once its database is back", func() bool { return down.pending(t) == 0 })
	resumed := time.Since(back)
	scheduled := backoffAfter(int(before.FailedRounds), relaytest.DefaultBackoffMax)
	t.Logf("down: cut %s, %d failed rounds (%d probes); database back → delivered %s, backoff scheduled %s (%.2f× of it)",
		back.Sub(cut).Round(time.Millisecond), before.FailedRounds, before.Probes, resumed.Round(time.Millisecond), scheduled, float64(resumed)/float64(scheduled))
	// A probe, or the lane heartbeat's wake once it has fenced the lanes
	// again, whichever comes first.
	end := checkOutageLogged(t, logs, time.Since(cut), "", "store", "down")
	if by := end.attrs["resumed_by"]; by != "probe" && by != "wake" {
		t.Fatalf("the outage ended by %q, want a probe or the heartbeat's wake", by)
	}
	t.Logf("down: end of the outage logged as %v", end.attrs)
	if n := len(logs.matching(slog.LevelWarn, "", "store", "ok")); n != 0 {
		t.Fatalf("the healthy store logged %d warnings", n)
	}
}

// A relay with lanes whose database is cut logs its failing rounds and its
// failing lane lease heartbeats (one every 50 ms with a 1 s LaneLease) in
// few lines each, and delivers again once the database is back.
func TestLaneRelayLogsADatabaseOutageInFewLines(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 4)
	e := pgLanes(t, f)
	proxy := testenv.NewProxy(t, e.target)
	logs := newLogLines()
	r := e.laneRelay(t, proxy, &recordingPublisher{}, relaytest.With(relay.Config{PublishTimeout: 500 * time.Millisecond, DisableNotify: true, Logger: logs.logger()}, relaytest.Config{BackoffMax: 20 * time.Millisecond, LaneLease: time.Second, ClaimLease: time.Second}))
	startRelay(t, r)
	f.add(t, true, txbox.Message{Topic: "t", Key: "k", Payload: []byte("0")})
	eventually(t, "first message delivered", func() bool { return f.count(t, "published_at IS NULL") == 0 })

	proxy.Cut()
	down := time.Now()
	const beats, rounds = 20, 30
	failedBeats := func() int { return len(logs.matching(slog.LevelDebug, "txbox relay: lane lease heartbeat")) }
	testenv.Await(t, "heartbeats and rounds failed", func() (bool, string) {
		return failedBeats() >= beats && testenv.RelayStats(r).FailedRounds >= rounds, fmt.Sprintf("%d heartbeat lines, %d failed rounds", failedBeats(), testenv.RelayStats(r).FailedRounds)
	})
	proxy.Resume()
	f.add(t, true, txbox.Message{Topic: "t", Key: "k", Payload: []byte("1")})
	eventually(t, "delivered after the database returned", func() bool { return f.count(t, "published_at IS NULL") == 0 })
	lasted := time.Since(down)
	var warns []string
	for _, l := range logs.matching(slog.LevelWarn, "") {
		warns = append(warns, l.msg)
	}
	starts := len(logs.matching(slog.LevelWarn, outageStarted)) + len(logs.matching(slog.LevelWarn, "txbox relay: lane lease heartbeats are failing"))
	reminders := len(logs.matching(slog.LevelWarn, "are still failing"))
	if starts != 2 || reminders > 2*int(lasted/time.Minute) || len(warns) != starts+reminders {
		t.Fatalf("database cut %s: warnings %q, want one when the rounds and one when the heartbeats started failing, and at most one reminder a minute of each", lasted.Round(time.Millisecond), warns)
	}
	eventually(t, "heartbeats logged as back", func() bool {
		return len(logs.matching(slog.LevelInfo, "txbox relay: lane lease heartbeats succeed again")) == 1
	})
	eventually(t, "rounds logged as back", func() bool { return len(logs.matching(slog.LevelInfo, outageEnded)) == 1 })
	t.Logf("database cut %s: %d failed rounds, %d heartbeat lines; %d warnings", lasted.Round(time.Millisecond), testenv.RelayStats(r).FailedRounds, failedBeats(), len(warns))
}
