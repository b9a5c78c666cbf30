package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// latencies records the commit-to-ack latency of the published messages
// of the stores it observes.
type latencies struct {
	txbox.BaseRelayObserver
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) Settled(_ string, o txbox.Outcome, sinceCreated time.Duration) {
	if o == txbox.OutcomePublished {
		l.mu.Lock()
		l.d = append(l.d, sinceCreated)
		l.mu.Unlock()
	}
}

func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := slices.Clone(l.d)
	slices.Sort(d)
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// quietModes are the configurations of BenchmarkGroupQuietStoreLatency.
var quietModes = []string{"single", "group50", "group50-backlog", "single-notify", "group50-notify", "group50-backlog-notify"}

// BenchmarkGroupQuietStoreLatency measures the commit-to-ack latency of
// single messages written one at a time to quiet stores, side by side in
// one run:
//
//   - single: one relay on one schema, no other table;
//   - group50: a Group of 50 schemas of one database, the messages spread
//     over 49 of them, the 50th idle;
//   - group50-backlog: the same, the 50th with a backlog of 500,000 rows
//     that it drains meanwhile.
//
// Each runs twice: with LISTEN/NOTIFY off and each commit followed by a
// Wake, as an in-process writer does; and (-notify) without Wake, as
// writers in other processes are, woken by LISTEN/NOTIFY: the single
// relay's own listening connection, the group's one shared connection.
//
// Every configuration writes the same 490 messages at the same pace into
// the same JetStream server, in two interleaved repetitions; the p50 and
// p99 over both are reported, with the rows the backlog still held when
// the last quiet message was acknowledged (0 fails the benchmark: the
// backlog did not overlap the measurement).
//
//	cd tests && CI=true go test -count=1 -p 1 -run '^$' -bench GroupQuietStoreLatency -benchtime 1x ./relay/
func BenchmarkGroupQuietStoreLatency(b *testing.B) {
	for range b.N {
		res := map[string]*latencies{}
		left := map[string][]int64{}
		for rep := range 2 {
			for _, mode := range quietModes {
				if res[mode] == nil {
					res[mode] = &latencies{}
				}
				l := quietLatency(b, mode, rep, res[mode])
				if strings.HasPrefix(mode, "group50-backlog") {
					left[mode] = append(left[mode], l)
				}
			}
		}
		for _, mode := range quietModes {
			p50, p99 := res[mode].quantile(0.50), res[mode].quantile(0.99)
			b.ReportMetric(float64(p50.Microseconds())/1000, mode+"-p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, mode+"-p99-ms")
			b.Logf("%-24s quiet messages %d  p50 %s  p99 %s", mode, len(res[mode].d), p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
		}
		b.Logf("backlog rows still pending after the last quiet ack: %v", left)
	}
}

// quietLatency runs one configuration and returns the backlog left.
func quietLatency(b *testing.B, mode string, rep int, lat *latencies) int64 {
	const (
		quiet   = 49
		each    = 10
		backlog = 500_000 // 100,000 drained within the measurement once claims took two round trips
	)
	pool, _ := testenv.Postgres(b, 8)
	nc := testenv.NATS(b)
	prefix := testenv.Subject()
	js, err := jetstream.New(nc)
	testenv.Must(b, err, "jetstream")
	name := testenv.Name("TXBOX")
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"}, Storage: jetstream.MemoryStorage})
	testenv.Must(b, err, "create stream")
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	testenv.Must(b, err, "publisher")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	single := strings.HasPrefix(mode, "single")
	notify := strings.HasSuffix(mode, "-notify")
	n := 50
	if single {
		n = 1
	}
	tn := pgTenants(b, pool, prefix, n)
	cfg := relay.Config{PollInterval: time.Second, DisableNotify: !notify}
	var wake func(i int)
	var relays []*relay.Relay
	done := make(chan error, 1)
	if single {
		c := cfg
		c.Observer = lat
		r := tn[0].newRelay(b, pub, c)
		relays = append(relays, r)
		wake = func(int) { r.Wake() }
		go func() { done <- runUntilStopped(ctx, r) }()
	} else {
		g, err := relay.NewGroup(relay.GroupConfig{DisableNotify: !notify})
		testenv.Must(b, err, "NewGroup")
		if strings.HasPrefix(mode, "group50-backlog") {
			tn[49].exec(b, "INSERT INTO %s (topic, payload) SELECT '"+prefix+"backlog', convert_to('row ' || i, 'UTF8') FROM generate_series(1, "+fmt.Sprint(backlog)+") i")
		}
		for i, x := range tn {
			c := cfg
			if i < quiet {
				c.Observer = lat
			}
			r := x.newRelay(b, pub, c)
			relays = append(relays, r)
			testenv.Must(b, g.Add(ctx, relay.Store{Name: x.name, Relay: r}), "add")
		}
		wake = func(i int) { g.Wake(tn[i].name) }
		go func() { done <- runUntilStopped(ctx, g) }()
	}
	before := len(lat.d)
	// Let the relays (and the backlog's drain) get going.
	time.Sleep(500 * time.Millisecond)
	for until := time.Now().Add(time.Minute); notify && !listening(relays); {
		if time.Now().After(until) {
			b.Fatalf("%s: not listening", mode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rng := rand.New(rand.NewPCG(uint64(rep), 16))
	for range quiet * each {
		i := 0
		if !single {
			i = rng.IntN(quiet)
		}
		tn[i].add(b, 1)
		if !notify {
			wake(i)
		}
		time.Sleep(5 * time.Millisecond)
	}
	testenv.Await(b, mode+": the quiet messages acknowledged", func() (bool, string) {
		lat.mu.Lock()
		got := len(lat.d) - before
		lat.mu.Unlock()
		return got >= quiet*each, fmt.Sprintf("%d of %d acknowledged", got, quiet*each)
	})
	var left int64
	if strings.HasPrefix(mode, "group50-backlog") {
		if left = tn[49].pending(b); left == 0 {
			b.Errorf("%s: the backlog of %d rows drained before the last quiet message was acknowledged: it did not overlap the measurement", mode, backlog)
		}
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("%s: %v", mode, err)
	}
	return left
}

func listening(rs []*relay.Relay) bool {
	for _, r := range rs {
		if !testenv.RelayStats(r).Listening {
			return false
		}
	}
	return true
}
