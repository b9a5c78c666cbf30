package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// A relay whose lane lease lapsed (its heartbeat was held up longer than
// the lease) claims no keyed row meanwhile, and may go idle with keyed
// rows pending; once its heartbeat renews the lease it is woken and
// delivers them, even with no poll due and no notification.
func TestRelayWakesWhenItsLapsedLeaseIsRenewed(t *testing.T) {
	t.Parallel()
	const lease, keyed = 2 * time.Second, 30
	f := pgxFixture(t, 8)
	log := newRunLog(nil)
	r := f.newRelay(t, log, relaytest.With(relay.Config{PollInterval: time.Hour, DisableNotify: true, BatchSize: 10}, relaytest.Config{LaneLease: lease}))
	var emptyRounds atomic.Int64
	g, err := relay.NewGroup(relay.GroupConfig{DisableNotify: true, OnEvent: func(e relay.GroupEvent) {
		if e.Kind == relay.EventFinished && e.Err == nil && e.Rows == 0 {
			emptyRounds.Add(1)
		}
	}})
	testenv.Must(t, err, "NewGroup")
	testenv.Must(t, g.Add(context.Background(), relay.Store{Name: "lapse", Relay: r}), "add")
	runGroup(t, g)
	testenv.Await(t, "the relay holds every lane", func() (bool, string) {
		n := len(testenv.RelayStats(r).Lanes)
		return n == 64, fmt.Sprintf("%d lanes", n)
	})

	// Hold the lanes table: the heartbeat's renewal waits, and the lease
	// lapses by the relay's clock once lease has passed.
	ctx := context.Background()
	holder, err := f.pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	t.Cleanup(func() { _ = holder.Rollback(ctx) })
	_, err = holder.Exec(ctx, "SELECT 1 FROM txbox_outbox_lanes FOR UPDATE")
	testenv.Must(t, err, "hold the lanes")
	var keys []string
	for i := 1; i <= keyed; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	addKeyed(t, f, "lapse", keys, 1)
	time.Sleep(lease + lease/2) // a lower bound: the lease has lapsed

	// A round now reads no keyed row, and the relay goes idle.
	before := emptyRounds.Load()
	r.Wake()
	testenv.Await(t, "a round that found nothing", func() (bool, string) {
		n := emptyRounds.Load() - before
		return n > 0, fmt.Sprintf("%d empty rounds", n)
	})
	if n := testenv.RelayStats(r).Published; n != 0 {
		t.Fatalf("%d published while the lease had lapsed, want 0", n)
	}

	testenv.Must(t, holder.Rollback(ctx), "release the lanes")
	testenv.Await(t, "the keyed rows published once the lease is renewed", func() (bool, string) {
		n := testenv.RelayStats(r).Published
		return n == keyed, fmt.Sprintf("%d published", n)
	})
	log.check(t, keys, 1)
}
