package relay_test

import (
	"context"
	"fmt"
	gomaps "maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// The configurations of TestQuietStoreBesideBacklog.
var besideModes = []string{"dedicated", "dedicated+backlog", "group50+backlog"}

// besideBacklog is the backlog of TestQuietStoreBesideBacklog's backlog store.
const besideBacklog = 100_000

// quietAcks records, for the quiet store, each published message's
// commit-to-ack latency and when it was recorded.
type quietAcks struct {
	txbox.BaseRelayObserver
	mu  sync.Mutex
	lat []time.Duration
	at  []time.Time
}

func (q *quietAcks) Settled(_ string, o txbox.Outcome, sinceCreated time.Duration) {
	if o != txbox.OutcomePublished {
		return
	}
	q.mu.Lock()
	q.lat = append(q.lat, sinceCreated)
	q.at = append(q.at, time.Now())
	q.mu.Unlock()
}

// backlogDone notes when the backlog store's last row was acknowledged.
type backlogDone struct {
	txbox.BaseRelayObserver
	n    atomic.Int64
	done atomic.Pointer[time.Time]
}

func (b *backlogDone) Settled(_ string, o txbox.Outcome, _ time.Duration) {
	if o == txbox.OutcomePublished && b.n.Add(1) == besideBacklog {
		now := time.Now()
		b.done.Store(&now)
	}
}

// besideResult is one run of TestQuietStoreBesideBacklog.
type besideResult struct {
	lat         []time.Duration // the quiet messages acknowledged while the backlog lasted
	waits, runs []time.Duration // group: the quiet store's queued→started and started→finished
	drain       time.Duration   // the backlog's drain time, 0 without one
	// group: the rounds of the idle stores, and for each wait of the
	// quiet store longer than 5 ms, the stores whose rounds ran when it was
	// queued ("backlog", "idle", "quiet": "backlog+idle" when both).
	idleRounds int
	blame      map[string][]time.Duration
	ahead      []int           // for each such wait, the stores queued ahead of it
	idleRuns   []time.Duration // the idle stores' rounds, started→finished
}

// TestQuietStoreBesideBacklog measures the commit-to-ack latency of a
// quiet store that receives a steady trickle (one message per transaction,
// every 5 ms, woken by LISTEN/NOTIFY as writers in other processes are),
// side by side in interleaved runs:
//
//   - dedicated: one Relay on the quiet store, nothing else running;
//   - dedicated+backlog: the same, and beside it a second Relay (a process
//     of its own would do the same) draining a backlog of 100,000 rows in
//     another schema of the database: the same load on the machine, no
//     shared scheduler;
//   - group50+backlog: a Group of 50 stores (50 schemas of one database):
//     the quiet store, the backlog store, and 48 idle stores.
//
// TXBOX_BENCH_MODES may name other modes, to find where the time goes:
// "group<n>" is a Group of n stores, "+backlog" gives the last a backlog
// (the quiet store's alone: a backlog Relay beside), "/budget<k>" sets the
// Group's DatabaseBudget, "/idlepoll<duration>" the PollInterval of the
// stores but the quiet one; "group2+backlog", "group50",
// "group50+backlog/budget4", "group50/idlepoll1m" are examples; a final
// "/stagger" adds the idle stores to the running group one every 20 ms
// instead of all before it starts, so that their looks do not come
// together.
//
// Only the quiet messages acknowledged while the backlog lasts count in
// the +backlog modes. For the group it also reports how long the quiet
// store's rounds waited for a turn (queued to started) and ran, how many
// rounds the idle stores ran, and which stores' rounds were running when
// a wait longer than 5 ms began, and how many stores were queued ahead.
// The trickle starts once the relays listen and TXBOX_BENCH_SETTLE (3s
// unless set) has passed, the backlog's drain already under way.
// TXBOX_BENCH_REPS sets the repetitions
// (default 4), TXBOX_BENCH_MODES a comma-separated subset of the modes. A
// measurement, not a test: it runs only with TXBOX_BENCH set.
//
//	cd tests && TXBOX_BENCH=beside CI=true go test -count=1 -run TestQuietStoreBesideBacklog -v ./relay/
func TestQuietStoreBesideBacklog(t *testing.T) {
	if os.Getenv("TXBOX_BENCH") == "" {
		t.Skip("a measurement: set TXBOX_BENCH=beside to run it")
	}
	reps := 4
	if s := os.Getenv("TXBOX_BENCH_REPS"); s != "" {
		fmt.Sscan(s, &reps)
	}
	settle := 3 * time.Second
	if s := os.Getenv("TXBOX_BENCH_SETTLE"); s != "" {
		d, err := time.ParseDuration(s)
		testenv.Must(t, err, "TXBOX_BENCH_SETTLE")
		settle = d
	}
	modes := besideModes
	if s := os.Getenv("TXBOX_BENCH_MODES"); s != "" {
		modes = strings.Split(s, ",")
	}
	all := map[string]*besideResult{}
	for _, m := range modes {
		all[m] = &besideResult{}
	}
	for rep := range reps {
		for _, mode := range modes {
			var r besideResult
			// A subtest each: its pools and schemas go when it ends.
			if !t.Run(fmt.Sprintf("%s#%d", mode, rep+1), func(t *testing.T) { r = besideRun(t, mode, settle) }) {
				t.FailNow()
			}
			q := quantiles(r.lat)
			t.Logf("rep %d %-24s quiet msgs %4d  p50 %7.2f ms  p99 %7.2f ms  backlog drain %s", rep+1, mode, len(r.lat), q[0], q[1], r.drain.Round(time.Millisecond))
			a := all[mode]
			a.lat = append(a.lat, r.lat...)
			a.waits = append(a.waits, r.waits...)
			a.runs = append(a.runs, r.runs...)
			a.drain += r.drain
			a.idleRounds += r.idleRounds
			a.ahead = append(a.ahead, r.ahead...)
			a.idleRuns = append(a.idleRuns, r.idleRuns...)
			if a.blame == nil {
				a.blame = map[string][]time.Duration{}
			}
			for k, v := range r.blame {
				a.blame[k] = append(a.blame[k], v...)
			}
		}
	}
	t.Logf("all %d reps pooled:", reps)
	for _, mode := range modes {
		a := all[mode]
		q := quantiles(a.lat)
		t.Logf("  %-24s quiet msgs %5d  p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  mean backlog drain %s", mode, len(a.lat), q[0], q[2], q[1], (a.drain / time.Duration(reps)).Round(time.Millisecond))
		if len(a.waits) > 0 {
			w, d := quantiles(a.waits), quantiles(a.runs)
			i := quantiles(a.idleRuns)
			t.Logf("  %-24s quiet store rounds %d: wait for a turn p50 %.2f ms p99 %.2f ms; round p50 %.2f ms p99 %.2f ms", "", len(a.waits), w[0], w[1], d[0], d[1])
			t.Logf("  %-24s idle stores' rounds %d: p50 %.2f ms p99 %.2f ms", "", a.idleRounds, i[0], i[1])
			if len(a.ahead) > 0 {
				h := slices.Sorted(slices.Values(a.ahead))
				t.Logf("  %-24s stores queued ahead of the quiet store when a wait over 5 ms began: p50 %d p99 %d max %d", "", h[len(h)/2], h[min(len(h)-1, len(h)*99/100)], h[len(h)-1])
			}
			for _, k := range slices.Sorted(gomaps.Keys(a.blame)) {
				b := quantiles(a.blame[k])
				t.Logf("  %-24s waits over 5 ms with rounds of %-14s running when queued: %4d, p50 %.2f ms p99 %.2f ms", "", k, len(a.blame[k]), b[0], b[1])
			}
		}
	}
}

// quantiles returns p50, p99 and p90 of d in milliseconds.
func quantiles(d []time.Duration) [3]float64 {
	d = slices.Clone(d)
	slices.Sort(d)
	if len(d) == 0 {
		return [3]float64{}
	}
	q := func(f float64) float64 {
		return float64(d[min(len(d)-1, int(f*float64(len(d))))].Microseconds()) / 1000
	}
	return [3]float64{q(0.5), q(0.99), q(0.9)}
}

// besideRun runs one configuration of TestQuietStoreBesideBacklog.
func besideRun(t *testing.T, mode string, settle time.Duration) besideResult {
	pool, _ := testenv.Postgres(t, 12)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	name := testenv.Name("TXBOX")
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"}, Storage: jetstream.MemoryStorage})
	testenv.Must(t, err, "create stream")
	defer func() { _ = js.DeleteStream(context.Background(), name) }()
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// A mode is "dedicated" or "group<stores>", then "+backlog" when one
	// store (the last) has a backlog, then "/budget<n>" for a Group's
	// DatabaseBudget other than the default.
	spec, stagger := strings.CutSuffix(mode, "/stagger")
	spec, idlePoll, _ := strings.Cut(spec, "/idlepoll")
	spec, budget, _ := strings.Cut(spec, "/budget")
	spec, backlog := strings.CutSuffix(spec, "+backlog")
	n, grouped := 1, strings.HasPrefix(spec, "group")
	if grouped {
		_, err := fmt.Sscan(strings.TrimPrefix(spec, "group"), &n)
		testenv.Must(t, err, "mode %s", mode)
	} else if backlog {
		n = 2
	}
	gcfg := relay.GroupConfig{}
	if budget != "" {
		_, err := fmt.Sscan(budget, &gcfg.DatabaseBudget)
		testenv.Must(t, err, "mode %s", mode)
	}
	var idleCfg relay.Config
	if idlePoll != "" {
		d, err := time.ParseDuration(idlePoll)
		testenv.Must(t, err, "mode %s", mode)
		idleCfg.PollInterval = d
	}
	tn := pgTenants(t, pool, prefix, n)
	quiet, back := tn[0], tn[n-1]
	acks, bl := &quietAcks{}, &backlogDone{}
	if backlog {
		back.exec(t, "INSERT INTO %s (topic, payload) SELECT '"+prefix+"backlog', convert_to('row ' || i, 'UTF8') FROM generate_series(1, "+fmt.Sprint(besideBacklog)+") i")
		back.exec(t, "ANALYZE %s")
	}
	var (
		evMu    sync.Mutex
		queued  time.Time
		started time.Time
		held    string
		ahead   int
		inQueue = map[string]int{}
		began   = map[string]time.Time{}
		running = map[string]int{}
		res     = besideResult{blame: map[string][]time.Duration{}}
	)
	class := func(store string) string {
		switch store {
		case quiet.name:
			return "quiet"
		case back.name:
			if backlog {
				return "backlog"
			}
		}
		return "idle"
	}
	var relays []*relay.Relay
	var runs []func(context.Context) error
	var addLater []relay.Store // /stagger: the idle stores, added to the running group
	addStaggered := func() {}
	if !grouped {
		for i, x := range tn {
			cfg := relay.Config{Observer: acks}
			if i > 0 {
				cfg.Observer = bl
			}
			r := x.newRelay(t, pub, cfg)
			relays = append(relays, r)
			runs = append(runs, func(ctx context.Context) error { return runUntilStopped(ctx, r) })
		}
	} else {
		gcfg.OnEvent = func(e relay.GroupEvent) {
			evMu.Lock()
			defer evMu.Unlock()
			c := class(e.Store)
			switch e.Kind {
			case relay.EventQueued:
				inQueue[c]++
			case relay.EventStarted:
				inQueue[c]--
				running[c]++
				if c == "idle" {
					res.idleRounds++
					began[e.Store] = time.Now()
				}
			case relay.EventFinished:
				running[c]--
				if c == "idle" {
					res.idleRuns = append(res.idleRuns, time.Since(began[e.Store]))
				}
			}
			if c != "quiet" {
				return
			}
			now := time.Now()
			switch e.Kind {
			case relay.EventQueued:
				if queued.IsZero() {
					queued = now
					ahead = inQueue["idle"] + inQueue["backlog"]
					var hs []string
					for _, k := range []string{"backlog", "idle", "quiet"} {
						if running[k] > 0 {
							hs = append(hs, k)
						}
					}
					held = strings.Join(hs, "+")
					if held == "" {
						held = "none"
					}
				}
			case relay.EventStarted:
				if !queued.IsZero() {
					w := now.Sub(queued)
					res.waits = append(res.waits, w)
					if w > 5*time.Millisecond {
						res.blame[held] = append(res.blame[held], w)
						res.ahead = append(res.ahead, ahead)
					}
				}
				started, queued = now, time.Time{}
			case relay.EventFinished:
				res.runs = append(res.runs, now.Sub(started))
			}
		}
		g, err := relay.NewGroup(gcfg)
		testenv.Must(t, err, "NewGroup")
		for i, x := range tn {
			cfg := idleCfg
			switch {
			case i == 0:
				cfg = relay.Config{Observer: acks}
			case i == n-1 && backlog:
				cfg.Observer = bl
			}
			r := x.newRelay(t, pub, cfg)
			relays = append(relays, r)
			if stagger && i > 0 && !(i == n-1 && backlog) {
				addLater = append(addLater, relay.Store{Name: x.name, Relay: r})
				continue
			}
			testenv.Must(t, g.Add(ctx, relay.Store{Name: x.name, Relay: r}), "add")
		}
		runs = append(runs, func(ctx context.Context) error { return runUntilStopped(ctx, g) })
		addStaggered = func() {
			for _, st := range addLater {
				testenv.Must(t, g.Add(ctx, st), "add")
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	// Start everything but the backlog's drain waits for the listeners:
	// the backlog rows are there before the relays start, as a store that
	// fell behind.
	done := make(chan error, len(runs))
	start := time.Now()
	for _, run := range runs {
		go func() { done <- run(ctx) }()
	}
	addStaggered()
	for until := time.Now().Add(time.Minute); !listening(relays); {
		if time.Now().After(until) {
			t.Fatalf("%s: not listening", mode)
		}
		time.Sleep(time.Millisecond)
	}
	// Let the stores settle (an idle store looks again after waits that
	// double up to its PollInterval, 1s), then the trickle: until the
	// backlog is drained, or for 3 s without one.
	time.Sleep(settle)
	sent := 0
	for end := time.Now().Add(3 * time.Second); ; sent++ {
		if backlog && bl.done.Load() != nil || !backlog && time.Now().After(end) {
			break
		}
		quiet.add(t, 1)
		time.Sleep(5 * time.Millisecond)
	}
	for until := time.Now().Add(time.Minute); ; {
		acks.mu.Lock()
		got := len(acks.lat)
		acks.mu.Unlock()
		if got >= sent {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("%s: %d of %d quiet messages acknowledged", mode, got, sent)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	for range runs {
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
	}
	acks.mu.Lock()
	defer acks.mu.Unlock()
	if !backlog {
		res.lat = acks.lat
		return res
	}
	end := *bl.done.Load()
	res.drain = end.Sub(start)
	for i, at := range acks.at {
		if at.Before(end) {
			res.lat = append(res.lat, acks.lat[i])
		}
	}
	return res
}
