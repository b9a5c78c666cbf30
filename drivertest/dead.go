package drivertest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
)

func (s *suite[TTx]) testDead(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	add(t, drv, ob, true,
		txbox.Message{ID: "poison", Topic: "t", Key: "k", Payload: []byte("k1")},
		txbox.Message{ID: "parked", Topic: "t", Key: "k", Payload: []byte("k2")},
		txbox.Message{ID: "other", Topic: "t", Key: "j", Payload: []byte("j1")},
	)
	var refuse atomic.Bool
	refuse.Store(true)
	pub := &Recorder{Reject: func(m txbox.Message) bool { return m.ID == "poison" && refuse.Load() }}
	r := newRelay(t, drv, pub, relaytest.With(relay.Config{MaxAttempts: 2}, relaytest.Config{RetryDelay: time.Microsecond}))
	letters, err := dead.New(drv, txbox.Config{})
	must(t, err, "dead.New")
	for {
		_, err := r.Round(ctx)
		must(t, err, "round")
		l, err := letters.List(ctx, 10)
		must(t, err, "list dead")
		if len(l) > 0 {
			break
		}
	}
	l, err := letters.List(ctx, 10)
	must(t, err, "list dead")
	if len(l) != 1 || l[0].ID != "poison" || l[0].Attempts != 2 || l[0].Parked != 1 || !strings.Contains(l[0].LastError, "rejects poison") || l[0].DeadAt.IsZero() {
		t.Fatalf("dead letters %+v, want poison after 2 attempts, parking 1", l)
	}
	drain(t, r)
	if got := payloads(pub.Published(), "*"); got != "j1" {
		t.Fatalf("published %s while k was parked, want j1", got)
	}
	st, err := r.Stats(ctx)
	must(t, err, "stats")
	if st.DeadRows != 1 || st.Parked != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v, want 1 dead, 1 parked, 1 pending", st)
	}

	refuse.Store(false)
	n, err := letters.Redrive(ctx, l[0].Seq)
	must(t, err, "redrive")
	if n != 1 {
		t.Fatalf("redrive changed %d rows", n)
	}
	drain(t, r)
	if got := payloads(pub.Published(), "k"); got != "k1,k2" {
		t.Fatalf("key k published %s after redrive, want k1,k2", got)
	}

	// Discard: a dead message is deleted and its key released.
	refuse.Store(true)
	add(t, drv, ob, true,
		txbox.Message{ID: "poison", Topic: "t", Key: "m", Payload: []byte("m1")},
		txbox.Message{ID: "after", Topic: "t", Key: "m", Payload: []byte("m2")},
	)
	for {
		_, err := r.Round(ctx)
		must(t, err, "round")
		l, err = letters.List(ctx, 10)
		must(t, err, "list dead")
		if len(l) > 0 {
			break
		}
	}
	n, err = letters.Discard(ctx)
	must(t, err, "discard")
	if n != 1 {
		t.Fatalf("discard deleted %d rows", n)
	}
	drain(t, r)
	if got := payloads(pub.Published(), "m"); got != "m2" {
		t.Fatalf("key m published %s after discard, want m2", got)
	}
}
