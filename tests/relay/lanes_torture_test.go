package relay_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// TestOrderingTorture with lanes: three relays killed at random (their
// connections cut, so their leases run out rather than being handed
// over), and a fourth that joins and leaves gracefully over and over,
// while producers commit versions of 50 aggregates. Every version reaches
// JetStream once, in order per aggregate.
func TestLanesOrderingTorture(t *testing.T) {
	t.Parallel()
	eachLaneDialect(t, 16, testLanesOrderingTorture)
}

func testLanesOrderingTorture(t *testing.T, e laneEnv) {
	const (
		aggregates = 50
		producers  = 8
		perProd    = 250
	)
	f := e.f
	ctx := context.Background()
	f.exec(t, "CREATE TABLE aggregates (id int PRIMARY KEY, version int NOT NULL)")
	for i := 1; i <= aggregates; i++ {
		f.exec(t, "INSERT INTO aggregates VALUES ("+strconv.Itoa(i)+", 0)")
	}
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	cfg := relaytest.With(relay.Config{PollInterval: 2 * time.Millisecond, BatchSize: 20,
		PublishTimeout: 300 * time.Millisecond}, relaytest.Config{LaneLease: time.Second, ClaimLease: time.Second})

	// delivered counts the messages that reach the stream's subjects. A
	// relay is killed only once some message arrived after it started: on
	// a slow machine a relay may take longer than its random life to take
	// over the lanes of the one killed before it, and kills at a fixed
	// pace would then leave no relay alive long enough to deliver.
	var delivered atomic.Int64
	sub, err := nc.Subscribe(prefix+">", func(*nats.Msg) { delivered.Add(1) })
	testenv.Must(t, err, "subscribe")
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	stopRelays := make(chan struct{})
	var relaysWG sync.WaitGroup
	var kills, joins atomic.Int64
	for i := 0; i < 3; i++ {
		relaysWG.Add(1)
		go func(seed uint64) {
			defer relaysWG.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for {
				proxy := testenv.NewProxy(t, e.target)
				r, closePool := e.relay(t, proxy, publisher(t, nc), cfg)
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				started := delivered.Load()
				go func() { _ = runUntilStopped(rctx, r); close(done) }()
				life := time.After(time.Duration(200+rng.IntN(800)) * time.Millisecond)
				for lived := false; !lived || delivered.Load() == started; {
					select {
					case <-stopRelays:
						cancel()
						<-done
						closePool()
						return
					case <-life:
						lived = true
					case <-time.After(20 * time.Millisecond):
					}
				}
				proxy.Cut() // dies: marks in flight fail, the leases run out
				cancel()
				<-done
				closePool()
				kills.Add(1)
			}
		}(uint64(i))
	}
	relaysWG.Add(1)
	go func() { // joins, works a while, leaves (hands its lanes over)
		defer relaysWG.Done()
		for {
			r, closePool := e.relay(t, nil, publisher(t, nc), cfg)
			if err := r.Start(ctx); err != nil {
				closePool()
				t.Errorf("start: %v", err)
				return
			}
			joins.Add(1)
			select {
			case <-stopRelays:
			case <-time.After(300 * time.Millisecond):
			}
			err := r.Stop(ctx)
			closePool()
			if err != nil {
				t.Errorf("stop: %v", err)
				return
			}
			select {
			case <-stopRelays:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	if e.versions != nil {
		e.versions(ctx, t, prefix+"agg", producers, perProd, aggregates)
	} else {
		produceVersions(ctx, t, f, prefix+"agg", producers, perProd, aggregates)
	}
	eventually(t, "all delivered", func() bool {
		return f.count(t, "published_at IS NULL") == 0
	})
	close(stopRelays)
	relaysWG.Wait()
	if kills.Load() == 0 || joins.Load() < 2 {
		t.Fatalf("%d kills, %d joins: the torture did not happen", kills.Load(), joins.Load())
	}

	payloads := streamPayloads(t, s)
	checkVersionOrder(t, payloads, producers*perProd)
	t.Logf("%d messages, %d kills, %d joins, per-key order held", len(payloads), kills.Load(), joins.Load())
}
