package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// A message recorded dead before the relay confirmed past it is replayed
// after a restart (here the server crashes: the slot is read again from
// the LSN it last confirmed) and rejected again; it is dead already, so
// the relay neither counts it nor tells its Observer a second time, and
// the table keeps one dead letter. In table mode and in message mode.
func TestDeadReplayedCountsOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct{ name, prefix string }{{"table", ""}, {"message", prefix}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			// No keepalive asks for a reply, and the relay's own status
			// updates are an hour apart: nothing is confirmed before the
			// crash, and all is read again after it.
			c, pool := logicalCluster(t, "wal_sender_timeout=0")
			ctx := context.Background()
			obs := &outcomes{}
			cfg := cdc.Config{MaxAttempts: 2, StatusInterval: time.Hour, MessagePrefix: mode.prefix, Observer: obs}
			_, err := cdc.CreateSlot(ctx, pool, cfg)
			testenv.Must(t, err, "create slot")
			var tries atomic.Int64
			l := &ledger{}
			l.setFail(func(m txbox.Message) error {
				if string(m.Payload) == "p:1" {
					tries.Add(1)
					return txbox.Reject(errors.New("poison"))
				}
				return nil
			})
			r := newRelay(t, pool, l, cfg)
			start(t, r)
			ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{MessagePrefix: mode.prefix})
			testenv.Must(t, err, "txbox.New")
			for _, p := range []string{"p:1", "p:2"} {
				testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "cdc.test", Key: "p", Payload: []byte(p)})), "add")
			}
			// p:2 goes once p:1 is settled: recorded dead.
			acks := func(payload string) int {
				n := 0
				for _, m := range l.snapshot() {
					if string(m.Payload) == payload {
						n++
					}
				}
				return n
			}
			eventually(t, "p:1 dead and p:2 delivered", func() (bool, string) {
				return acks("p:2") == 1, fmt.Sprintf("p:1 tried %d times; %s", tries.Load(), progress(r, l))
			})
			if st := statsOf(r); st.Dead != 1 || obs.count(txbox.OutcomeDead) != 1 {
				t.Fatalf("before the crash: stats %+v, %d dead told", st, obs.count(txbox.OutcomeDead))
			}
			c.Crash()
			c.Start()
			pool.Reset() // the connections died with the server
			eventually(t, "p:1 rejected again and p:2 delivered again after the restart", func() (bool, string) {
				return acks("p:2") == 2, fmt.Sprintf("p:1 tried %d times; %s", tries.Load(), progress(r, l))
			})
			if n := tries.Load(); n != 4 {
				t.Fatalf("p:1 tried %d times, want 2 before the crash and 2 after", n)
			}
			if st := statsOf(r); st.Dead != 1 || obs.count(txbox.OutcomeDead) != 1 {
				t.Fatalf("after the replay: stats %+v, %d dead told (one message died)", st, obs.count(txbox.OutcomeDead))
			}
			var letters int
			testenv.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM txbox_outbox WHERE payload = 'p:1' AND dead_at IS NOT NULL`).Scan(&letters), "dead letters")
			if letters != 1 {
				t.Fatalf("%d dead letters of p:1", letters)
			}
		})
	}
}

// A publish that finds the publisher closed for good stops the relay, but
// only once the other publishes in flight have been answered: what they
// delivered is counted and confirmed, so a relay that reads the slot next
// publishes what was not delivered, not what was.
func TestPublisherClosedSettlesPublishesInFlight(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	obs := &outcomes{}
	cfg := cdc.Config{PublishTimeout: time.Hour, Observer: obs} // the held publish ends when the test opens the gate
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	g := &gated{held: "h", gate: make(chan struct{})}
	g.setFail(func(m txbox.Message) error {
		if string(m.Payload) == "c:1" {
			return fmt.Errorf("%w: the broker's connection is gone", txbox.ErrPublisherClosed)
		}
		return nil
	})
	r := newRelay(t, pool, g, cfg)
	start(t, r)
	var once sync.Once
	open := func() { once.Do(func() { close(g.gate) }) }
	t.Cleanup(open)
	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	add := func(key, payload string) {
		t.Helper()
		testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "cdc.test", Key: key, Payload: []byte(payload)})), "add")
	}
	add("h", "h:1")
	eventually(t, "the publish of h:1 in flight", func() (bool, string) {
		n := g.holding()
		return n == 1, fmt.Sprintf("%d held", n)
	})
	add("c", "c:1")
	stopped := func() bool {
		select {
		case <-r.Stopped():
			return true
		default:
			return false
		}
	}
	eventually(t, "the publish of c:1 answered: the publisher is closed", func() (bool, string) {
		return stopped() || obs.failures() > 0, progress(r, &g.ledger)
	})
	if stopped() {
		t.Fatalf("the relay stopped while the publish of h:1 was in flight: %s", progress(r, &g.ledger))
	}
	open()
	eventually(t, "the relay stopped", func() (bool, string) { return stopped(), progress(r, &g.ledger) })
	if err := r.Err(); !errors.Is(err, txbox.ErrPublisherClosed) {
		t.Fatalf("the relay stopped with %v", err)
	}
	if st := statsOf(r); st.Published != 1 || obs.count(txbox.OutcomePublished) != 1 {
		t.Fatalf("h:1's ack not counted: stats %+v, %d published told", st, obs.count(txbox.OutcomePublished))
	}
	// The next relay on the slot starts past h:1: it publishes c:1 only.
	l := &ledger{}
	start(t, newRelay(t, pool, l, cdc.Config{}))
	eventually(t, "c:1 delivered by the next relay", func() (bool, string) {
		return len(l.snapshot()) > 0, fmt.Sprintf("%d acknowledged", len(l.snapshot()))
	})
	var got []string
	for _, m := range l.snapshot() {
		got = append(got, string(m.Payload))
	}
	if !slices.Equal(got, []string{"c:1"}) {
		t.Fatalf("the next relay delivered %v, want c:1 alone (h:1 was acknowledged and confirmed)", got)
	}
}
