package drivertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
)

func (s *suite[TTx]) testAddClaimMark(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	msgs := []txbox.Message{
		{ID: "id-1", Topic: "orders.placed", Payload: []byte("p1"), Headers: map[string]string{"traceparent": "00-abc"}},
		{ID: "id-2", Topic: "orders.paid", Key: "order-7", Payload: []byte("p2")},
		{Topic: "orders.shipped", Payload: []byte{0, 1, 2, 255}},
	}
	ids := add(t, drv, ob, true, msgs...)
	if len(ids) != 3 || ids[0] != "id-1" || ids[1] != "id-2" || ids[2] == "" {
		t.Fatalf("Add returned ids %q, want id-1, id-2 and a new one", ids)
	}
	if msgs[2].ID != "" {
		t.Fatal("Add changed the caller's messages")
	}
	msgs[2].ID = ids[2]
	_, err := ob.AddNoTx(ctx, txbox.Message{ID: "id-4", Topic: "t", Payload: []byte("p4")})
	must(t, err, "AddNoTx")

	pub := &Recorder{}
	r := newRelay(t, drv, pub, relay.Config{})
	st, err := r.Stats(ctx)
	must(t, err, "stats")
	if st.Pending != 4 {
		t.Fatalf("pending %d, want 4", st.Pending)
	}
	drain(t, r)
	got := pub.Published()
	if len(got) != 4 {
		t.Fatalf("published %d messages, want 4", len(got))
	}
	// Publish order across keys is not promised (keyed and unkeyed
	// messages may go in separate groups): compare by id.
	byID := map[string]txbox.Message{}
	for _, g := range got {
		byID[g.ID] = g
	}
	want := append(msgs, txbox.Message{ID: "id-4", Topic: "t", Payload: []byte("p4")})
	for i, m := range want {
		g := byID[m.ID]
		if g.ID != m.ID || g.Topic != m.Topic || g.Key != m.Key || string(g.Payload) != string(m.Payload) || fmt.Sprint(g.Headers) != fmt.Sprint(m.Headers) {
			t.Errorf("message %d: published %+v, want %+v", i, g, m)
		}
	}
	st, err = r.Stats(ctx)
	must(t, err, "stats")
	if st.Pending != 0 || st.Published != 4 {
		t.Fatalf("after drain: pending %d, published %d", st.Pending, st.Published)
	}
	drain(t, r)
	if n := len(pub.Published()); n != 4 {
		t.Fatalf("a marked message was published again (%d publishes)", n)
	}
}

func (s *suite[TTx]) testRollback(t *testing.T) {
	drv := s.setup(t)
	ob := outbox(t, drv)
	add(t, drv, ob, false, txbox.Message{ID: "rolled-back", Topic: "t", Payload: []byte("x")})
	add(t, drv, ob, true, txbox.Message{ID: "committed", Topic: "t", Payload: []byte("y")})
	pub := &Recorder{}
	drain(t, newRelay(t, drv, pub, relay.Config{}))
	got := pub.Published()
	if len(got) != 1 || got[0].ID != "committed" {
		t.Fatalf("published %v, want only the committed message", got)
	}
}

func (s *suite[TTx]) testCleanup(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	var msgs []txbox.Message
	for i := range 7 {
		msgs = append(msgs, txbox.Message{Topic: "t", Payload: []byte{byte(i)}})
	}
	add(t, drv, ob, true, msgs...)
	pub := &Recorder{}
	r := newRelay(t, drv, pub, relaytest.With(relay.Config{Retention: time.Microsecond}, relaytest.Config{CleanupBatchSize: 3}))
	drain(t, r)
	add(t, drv, ob, true, txbox.Message{Topic: "t", Payload: []byte("pending")})
	// Published rows are older than a microsecond once the clock moves.
	pastRetention()
	n, err := r.Cleanup(ctx)
	must(t, err, "cleanup")
	if n != 7 {
		t.Fatalf("cleanup deleted %d rows, want the 7 published", n)
	}
	st, err := r.Stats(ctx)
	must(t, err, "stats")
	if st.Pending != 1 {
		t.Fatalf("pending %d after cleanup, want 1", st.Pending)
	}
	long := newRelay(t, drv, pub, relay.Config{Retention: time.Hour})
	drain(t, long)
	if n, err := long.Cleanup(ctx); err != nil || n != 0 {
		t.Fatalf("cleanup within retention deleted %d, %v", n, err)
	}
}

func (s *suite[TTx]) testKeyOrder(t *testing.T) {
	drv := s.setup(t)
	ob := outbox(t, drv)
	// Writers add to a few keys concurrently, several messages per
	// transaction; each key's messages carry a per-key sequence taken
	// under a Go lock held until commit, so commit order is known.
	const keys, writers, perWriter = 3, 6, 10
	var locks [keys]sync.Mutex
	var next [keys]int
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range perWriter {
				k := (w + i) % keys
				locks[k].Lock()
				tx, dtx, err := drv.BeginTx(ctx)
				if err == nil {
					next[k]++
					_, err = ob.Add(ctx, tx,
						txbox.Message{Topic: "t", Payload: []byte("unkeyed")},
						txbox.Message{Topic: "t", Key: fmt.Sprint("key", k), Payload: []byte(fmt.Sprint(next[k]))})
					if err == nil {
						err = dtx.Commit(ctx)
					} else {
						_ = dtx.Rollback(ctx)
					}
				}
				locks[k].Unlock()
				if err != nil {
					t.Errorf("writer: %v", err)
					return
				}
			}
		}()
	}
	pub := &Recorder{}
	r := newRelay(t, drv, pub, relay.Config{BatchSize: 7})
	wg.Wait()
	drain(t, r)
	for k := range keys {
		var want []string
		for i := 1; i <= next[k]; i++ {
			want = append(want, fmt.Sprint(i))
		}
		if got := payloads(pub.Published(), fmt.Sprint("key", k)); got != strings.Join(want, ",") {
			t.Errorf("key%d published %s, want %s", k, got, strings.Join(want, ","))
		}
	}
}
