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

// The life of an entry: delivered, retried and redelivered with a higher
// count, claimed from a consumer that died, dead-lettered, acked.
func TestSubscriber(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txbs") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix, MaxLen: 1000})
	testenv.Must(t, err, "publisher")
	var msgs []txbox.Message
	for _, id := range []string{"a", "b", "c", "d"} {
		msgs = append(msgs, txbox.Message{ID: id, Topic: "orders", Key: "k", Payload: []byte("p" + id), Headers: map[string]string{"h": id}})
	}
	if errs := p.Publish(ctx, msgs); errs != nil {
		t.Fatal(errs)
	}
	// AckWait is long: nothing is claimed by waiting, only by Retry, or
	// from a dead consumer after we age its entry (XCLAIM IDLE below).
	binding := redisstream.Binding(prefix+"orders", "g")
	subscribe := func(consumer string) txbox.Subscription {
		s, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: consumer, Block: 50 * time.Millisecond, AckWait: time.Hour})
		testenv.Must(t, err, "subscriber")
		sub, err := s.Subscribe(ctx, binding, 1)
		testenv.Must(t, err, "subscribe")
		return sub
	}
	next := func(sub txbox.Subscription) (txbox.Delivery, txbox.Received) {
		t.Helper()
		d, err := sub.Next(ctx)
		testenv.Must(t, err, "next")
		return d, d.Message()
	}
	s1 := subscribe("c1")
	da, a := next(s1)
	db, b := next(s1)
	if a.ID != "a" || b.ID != "b" {
		t.Fatalf("first deliveries: %s %s", a.ID, b.ID)
	}
	if a.Key != "k" || string(a.Payload) != "pa" || a.Headers["h"] != "a" || a.Deliveries != 1 || a.Binding != binding {
		t.Fatalf("delivery a: %+v", a)
	}
	testenv.Must(t, da.Ack(ctx), "ack")
	testenv.Must(t, db.Retry(ctx, 0), "retry")
	// A second consumer gets the retried b first, with its count, then c.
	s2 := subscribe("c2")
	d, got := next(s2)
	if got.ID != "b" || got.Deliveries != 2 {
		t.Fatalf("after retry: %+v", got)
	}
	testenv.Must(t, d.DeadLetter(ctx, errors.New("poison")), "dead")
	// c1 takes c and dies without settling it.
	if _, got = next(s1); got.ID != "c" {
		t.Fatalf("c: %+v", got)
	}
	// c has been idle an hour, as far as Redis knows.
	pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: prefix + "orders", Group: "g", Consumer: "c1", Start: "-", End: "+", Count: 10}).Result()
	testenv.Must(t, err, "xpending c1")
	if len(pend) != 1 {
		t.Fatalf("c1 has %d pending entries, want c", len(pend))
	}
	testenv.Must(t, rdb.Do(ctx, "XCLAIM", prefix+"orders", "g", "c1", 0, pend[0].ID, "IDLE", time.Hour.Milliseconds(), "JUSTID").Err(), "age entry")
	if d, got = next(s2); got.ID != "c" || got.Deliveries != 2 {
		t.Fatalf("claim from dead consumer: %+v", got)
	}
	testenv.Must(t, d.Ack(ctx), "ack")
	if d, got = next(s2); got.ID != "d" {
		t.Fatalf("d: %+v", got)
	}
	testenv.Must(t, d.Ack(ctx), "ack")
	// Nothing is pending; the dead-letter stream holds b with its cause.
	sum, err := rdb.XPending(ctx, prefix+"orders", "g").Result()
	testenv.Must(t, err, "xpending")
	if sum.Count != 0 {
		t.Fatalf("%d entries still pending", sum.Count)
	}
	dead, err := rdb.XRange(ctx, prefix+"orders"+redisstream.DefaultDeadLetterSuffix, "-", "+").Result()
	testenv.Must(t, err, "xrange dead")
	if len(dead) != 1 || dead[0].Values["id"] != "b" || dead[0].Values["error"] != "poison" || dead[0].Values["deliveries"] != "2" {
		t.Fatalf("dead stream: %+v", dead)
	}
	// Empty stream: Next waits (reading every Block) until its context ends.
	ectx, ecancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer ecancel()
	if d, err := s1.Next(ectx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("empty stream: %v, %v", d, err)
	}
	testenv.Must(t, s1.Close(ctx), "close")
	testenv.Must(t, s2.Close(ctx), "close")
}

// MAXLEN ~ trims the stream.
func TestStreamMaxLen(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txbm") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	ctx := context.Background()
	p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix, MaxLen: 10})
	testenv.Must(t, err, "publisher")
	for range 5 {
		msgs := make([]txbox.Message, 500)
		for i := range msgs {
			msgs[i] = txbox.Message{ID: testenv.Name("m"), Topic: "t", Payload: []byte("x")}
		}
		if errs := p.Publish(ctx, msgs); errs != nil {
			t.Fatal(errs)
		}
	}
	n, err := rdb.XLen(ctx, prefix+"t").Result()
	testenv.Must(t, err, "xlen")
	if n >= 2500 || n < 10 {
		t.Fatalf("stream length %d after 2500 adds with MAXLEN ~ 10", n)
	}
}
