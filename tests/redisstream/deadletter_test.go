package redisstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
)

// TestDeadLetterOfAnEntryClaimedTwice: a consumer stalls past AckWait
// holding an entry, another claims it, and both settle it. The
// dead-letter stream gets one copy when both dead-letter it, and none
// when the other one acked it first.
func TestDeadLetterOfAnEntryClaimedTwice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		first    func(txbox.Delivery) error
		wantDead int64
	}{
		{"dead_then_dead", func(d txbox.Delivery) error { return d.DeadLetter(context.Background(), errors.New("poison")) }, 1},
		{"ack_then_dead", func(d txbox.Delivery) error { return d.Ack(context.Background()) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := testenv.Redis(t)
			prefix := testenv.Name("txdl") + ":"
			testenv.DeleteKeys(t, rdb, prefix+"*")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
			testenv.Must(t, err, "publisher")
			if errs := p.Publish(ctx, []txbox.Message{{ID: "poison-1", Topic: "orders", Payload: []byte("x")}}); errs != nil {
				t.Fatal(errs)
			}
			stream := prefix + "orders"
			testenv.Must(t, redisstream.EnsureGroup(ctx, rdb, stream, "g", "0"), "group")
			binding := redisstream.Binding(stream, "g")
			var subs []txbox.Subscription
			for _, c := range []string{"c1", "c2"} {
				s, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: c, Block: 50 * time.Millisecond, AckWait: time.Hour})
				testenv.Must(t, err, "subscriber")
				sub, err := s.Subscribe(ctx, binding, 1)
				testenv.Must(t, err, "subscribe")
				t.Cleanup(func() { _ = sub.Close(context.Background()) })
				subs = append(subs, sub)
			}
			d1, err := subs[0].Next(ctx)
			testenv.Must(t, err, "next c1")
			// c1 stalls: its entry ages past AckWait, and c2 claims it.
			entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
			testenv.Must(t, err, "xrange")
			id := entries[0].ID
			testenv.Must(t, rdb.Do(ctx, "XCLAIM", stream, "g", "c1", 0, id, "IDLE", 2*time.Hour.Milliseconds(), "JUSTID").Err(), "age")
			d2, err := subs[1].Next(ctx)
			testenv.Must(t, err, "next c2")
			if d2.Message().ID != "poison-1" {
				t.Fatalf("c2 got %s, want the claimed poison-1", d2.Message().ID)
			}
			testenv.Must(t, tc.first(d1), "c1 settles")
			testenv.Must(t, d2.DeadLetter(ctx, errors.New("poison")), "c2 dead-letters")
			dead, err := rdb.XLen(ctx, stream+redisstream.DefaultDeadLetterSuffix).Result()
			testenv.Must(t, err, "xlen")
			pending, err := rdb.XPending(ctx, stream, "g").Result()
			testenv.Must(t, err, "xpending")
			if dead != tc.wantDead || pending.Count != 0 {
				t.Fatalf("%d dead letter(s), %d pending, want %d and 0", dead, pending.Count, tc.wantDead)
			}
		})
	}
}
