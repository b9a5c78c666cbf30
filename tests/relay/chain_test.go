package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// A relay draining a keyed backlog; stopped
// at any point, it leaves no row claimed and no connection in use, and relays
// started after it go on in per-key order.
func TestStopMidKeyedDrainLeavesNothingClaimed(t *testing.T) {
	t.Parallel()
	for _, lanes := range []bool{false, true} {
		t.Run(fmt.Sprintf("lanes=%v", lanes), func(t *testing.T) {
			t.Parallel()
			stopMidKeyedDrain(t, lanes)
		})
	}
}

func stopMidKeyedDrain(t *testing.T, lanes bool) {
	const perKey = 40
	f := pgxFixture(t, 8)
	var keys []string
	for _, k := range "abcdefghijklmnopqrst" {
		keys = append(keys, string(k))
	}
	addKeyed(t, f, "chain.stop", keys, perKey)
	total := int64(len(keys) * perKey)
	log := newRunLog(nil)
	ctx := context.Background()
	var published int64
	for cycle := 0; published < total; cycle++ {
		if cycle == 500 {
			t.Fatalf("%d of %d messages published after %d relays", published, total, cycle)
		}
		// Each relay is stopped at a different point: during or after its
		// first, second or third publish.
		stop := make(chan struct{})
		pub := &stopAfter{Publisher: log, n: 1 + cycle%3, delay: time.Duration(cycle%5) * 200 * time.Microsecond, stop: stop}
		r := f.newRelay(t, pub, relay.Config{BatchSize: 10, PollInterval: time.Hour, DisableNotify: true})
		testenv.Must(t, r.Start(ctx), "start relay %d", cycle)
		for done := false; !done; {
			select {
			case <-stop:
				done = true
			case <-time.After(10 * time.Millisecond): // the backlog's end came first
				done = published+testenv.RelayStats(r).Published == total
			}
		}
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		testenv.Must(t, r.Stop(stopCtx), "stop relay %d", cycle)
		cancel()
		published += testenv.RelayStats(r).Published
		var locked int64
		testenv.Must(t, f.pool.QueryRow(ctx, `SELECT count(*) - (SELECT count(*) FROM (SELECT 1 FROM txbox_outbox
			WHERE published_at IS NULL FOR UPDATE SKIP LOCKED) s) FROM txbox_outbox WHERE published_at IS NULL`).Scan(&locked), "locked rows")
		if locked != 0 {
			t.Fatalf("relay %d stopped, leaving %d row(s) claimed", cycle, locked)
		}
		// A connection whose query the stop cancelled is closed in the
		// background: wait for that, not for a claim held (which the
		// locked rows above would have shown).
		testenv.Await(t, "the relay's connections given back", func() (bool, string) {
			n := f.pool.Stat().AcquiredConns()
			return n == 0, fmt.Sprintf("relay %d stopped, %d connection(s) in use", cycle, n)
		})
	}
	if published != total {
		t.Fatalf("%d messages published for %d rows", published, total)
	}
	log.check(t, keys, perKey)
}

// stopAfter closes stop, delay after the start of its n-th Publish (or at
// once, with no delay).
type stopAfter struct {
	txbox.Publisher
	n     int
	delay time.Duration
	stop  chan struct{}
	calls atomic.Int64
}

func (p *stopAfter) Publish(ctx context.Context, msgs []txbox.Message) []error {
	if p.calls.Add(1) == int64(p.n) { // a second round may publish beside the first
		go func() {
			time.Sleep(p.delay)
			close(p.stop)
		}()
	}
	return p.Publisher.Publish(ctx, msgs)
}
