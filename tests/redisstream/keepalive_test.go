package redisstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
)

// ExtendDeadline resets the idle time of an entry pending for this
// consumer without counting a delivery, and refuses — leaving it where it
// is — an entry another consumer has claimed meanwhile.
func TestExtendDeadline(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txbk") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	if errs := p.Publish(ctx, []txbox.Message{{ID: "a", Topic: "orders", Payload: []byte("x")}}); errs != nil {
		t.Fatal(errs)
	}
	stream := prefix + "orders"
	s, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: "c1", Block: 50 * time.Millisecond, AckWait: time.Hour})
	testenv.Must(t, err, "subscriber")
	sub, err := s.Subscribe(ctx, redisstream.Binding(stream, "g"), 1)
	testenv.Must(t, err, "subscribe")
	d, err := sub.Next(ctx)
	testenv.Must(t, err, "next")
	x, ok := d.(txbox.DeadlineExtender)
	if !ok || x.AckDeadline() != time.Hour {
		t.Fatalf("delivery %T: want a DeadlineExtender with AckDeadline 1h", d)
	}
	pending := func() redis.XPendingExt {
		t.Helper()
		ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
		testenv.Must(t, err, "xpending")
		if len(ps) != 1 {
			t.Fatalf("pending %v, want one entry", ps)
		}
		return ps[0]
	}
	// Age the entry, then extend: idle time back near 0, still 1 delivery.
	testenv.Must(t, rdb.Do(ctx, "XCLAIM", stream, "g", "c1", 0, pending().ID, "IDLE", 60000, "JUSTID").Err(), "age")
	if before := pending(); before.Idle < time.Minute {
		t.Fatalf("aged entry idle %v", before.Idle)
	}
	testenv.Must(t, x.ExtendDeadline(ctx), "extend")
	if after := pending(); after.Idle >= time.Minute || after.RetryCount != 1 || after.Consumer != "c1" {
		t.Errorf("after ExtendDeadline: %+v, want idle reset, 1 delivery, consumer c1", after)
	}
	// Another consumer claims it: extending must not take it back.
	testenv.Must(t, rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: "g", Consumer: "c2", Messages: []string{pending().ID}}).Err(), "claim by c2")
	if err := x.ExtendDeadline(ctx); err == nil {
		t.Error("ExtendDeadline of an entry c2 claimed succeeded")
	}
	if got := pending().Consumer; got != "c2" {
		t.Errorf("entry owned by %s after a refused extension, want c2", got)
	}
	// Acked: nothing to extend.
	testenv.Must(t, rdb.XAck(ctx, stream, "g", pending().ID).Err(), "ack")
	if err := x.ExtendDeadline(ctx); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("ExtendDeadline of an acked entry: %v, want an error", err)
	}
}

// Entries a subscription read and has not handed out yet are kept alive
// too: another consumer of the group, reading three AckWaits later, claims
// none of them, and they come out of the first with one delivery each.
func TestBufferedEntriesAreKeptAlive(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txbb") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	var msgs []txbox.Message
	for _, id := range []string{"a", "b", "c", "d"} {
		msgs = append(msgs, txbox.Message{ID: id, Topic: "orders", Payload: []byte("x")})
	}
	if errs := p.Publish(ctx, msgs); errs != nil {
		t.Fatal(errs)
	}
	binding := redisstream.Binding(prefix+"orders", "g")
	subscribe := func(consumer string) txbox.Subscription {
		s, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: consumer, Block: 50 * time.Millisecond, AckWait: ackWait})
		testenv.Must(t, err, "subscriber %s", consumer)
		sub, err := s.Subscribe(ctx, binding, 4)
		testenv.Must(t, err, "subscribe %s", consumer)
		t.Cleanup(func() { _ = sub.Close(context.Background()) })
		return sub
	}
	c1 := subscribe("c1")
	first, err := c1.Next(ctx) // reads all four, hands out one
	testenv.Must(t, err, "next")
	testenv.Must(t, first.Ack(ctx), "ack")
	time.Sleep(3 * ackWait) // the other three wait in c1's buffer (not an assertion)
	c2 := subscribe("c2")
	nctx, ncancel := context.WithTimeout(ctx, ackWait)
	if d, err := c2.Next(nctx); err == nil {
		t.Errorf("c2 claimed %s (delivery %d), buffered at c1", d.Message().ID, d.Message().Deliveries)
	}
	ncancel()
	// An entry another consumer took meanwhile (as after a failed touch)
	// leaves the buffer at the next touch: c1 hands out b, then d, not c.
	stream := prefix + "orders"
	ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	testenv.Must(t, err, "xpending")
	if len(ps) != 3 {
		t.Fatalf("pending %v, want b, c and d", ps)
	}
	testenv.Must(t, rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: "g", Consumer: "c3", Messages: []string{ps[1].ID}}).Err(), "claim c by c3")
	time.Sleep(ackWait) // a touch of c1's buffer runs meanwhile (not an assertion)
	for _, want := range []string{"b", "d"} {
		d, err := c1.Next(ctx)
		testenv.Must(t, err, "next")
		if m := d.Message(); m.ID != want || m.Deliveries != 1 {
			t.Errorf("c1 handed out %s (delivery %d), want %s (delivery 1)", m.ID, m.Deliveries, want)
		}
		testenv.Must(t, d.Ack(ctx), "ack")
	}
}
