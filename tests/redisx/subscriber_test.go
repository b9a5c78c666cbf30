package redisx_test

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/redisx"
	"github.com/txbox/txbox/tests/testenv"
)

// The life of an entry: delivered, nacked and redelivered with a higher
// count, claimed from a consumer that died, dead-lettered, acked.
func TestStreamSubscriber(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	prefix := testenv.Name("txbs") + ":"
	cleanup(t, rdb, prefix+"*")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := redisx.NewStreamPublisher(rdb, redisx.StreamPublisherConfig{StreamPrefix: prefix, MaxLen: 1000})
	testenv.Must(t, err, "publisher")
	var msgs []txbox.Message
	for _, id := range []string{"a", "b", "c", "d"} {
		msgs = append(msgs, txbox.Message{ID: id, Topic: "orders", Key: "k", Payload: []byte("p" + id), Headers: map[string]string{"h": id}})
	}
	if errs := p.Publish(ctx, msgs); errs != nil {
		t.Fatal(errs)
	}
	// MinIdle is long: nothing is claimed by waiting, only by Nack, or
	// from a dead consumer after we age its entry (XCLAIM IDLE below).
	sub := func(consumer string) *redisx.StreamSubscriber {
		s, err := redisx.NewStreamSubscriber(ctx, rdb, redisx.StreamSubscriberConfig{
			Stream: prefix + "orders", Group: "g", Consumer: consumer, Block: 50 * time.Millisecond, MinIdle: time.Hour,
		})
		testenv.Must(t, err, "subscriber")
		return s
	}
	s1 := sub("c1")
	ds, err := s1.Fetch(ctx, 2)
	testenv.Must(t, err, "fetch")
	if len(ds) != 2 || ds[0].Message.ID != "a" || ds[1].Message.ID != "b" {
		t.Fatalf("first fetch: %+v", ds)
	}
	if m := ds[0].Message; m.Key != "k" || string(m.Payload) != "pa" || m.Headers["h"] != "a" || ds[0].Deliveries != 1 {
		t.Fatalf("delivery a: %+v", ds[0])
	}
	testenv.Must(t, s1.Ack(ctx, ds[0]), "ack")
	testenv.Must(t, s1.Nack(ctx, ds[1]), "nack")
	// A second consumer gets the nacked b first, with its count, then c.
	s2 := sub("c2")
	got, err := s2.Fetch(ctx, 1)
	testenv.Must(t, err, "fetch")
	if len(got) != 1 || got[0].Message.ID != "b" || got[0].Deliveries != 2 {
		t.Fatalf("after nack: %+v", got)
	}
	testenv.Must(t, s2.Dead(ctx, got[0], "poison"), "dead")
	// c1 takes c and dies without settling it.
	got, err = s1.Fetch(ctx, 1)
	testenv.Must(t, err, "fetch")
	if len(got) != 1 || got[0].Message.ID != "c" {
		t.Fatalf("c: %+v", got)
	}
	// c has been idle an hour, as far as Redis knows.
	testenv.Must(t, rdb.Do(ctx, "XCLAIM", prefix+"orders", "g", "c1", 0, got[0].EntryID, "IDLE", time.Hour.Milliseconds(), "JUSTID").Err(), "age entry")
	got, err = s2.Fetch(ctx, 5)
	testenv.Must(t, err, "fetch")
	if len(got) != 1 || got[0].Message.ID != "c" || got[0].Deliveries != 2 {
		t.Fatalf("claim from dead consumer: %+v", got)
	}
	testenv.Must(t, s2.Ack(ctx, got...), "ack")
	got, err = s2.Fetch(ctx, 5)
	testenv.Must(t, err, "fetch")
	if len(got) != 1 || got[0].Message.ID != "d" {
		t.Fatalf("d: %+v", got)
	}
	testenv.Must(t, s2.Ack(ctx, got...), "ack")
	// Nothing is pending; the dead-letter stream holds b with its cause.
	pend, err := rdb.XPending(ctx, prefix+"orders", "g").Result()
	testenv.Must(t, err, "xpending")
	if pend.Count != 0 {
		t.Fatalf("%d entries still pending", pend.Count)
	}
	dead, err := rdb.XRange(ctx, s2.DeadStream(), "-", "+").Result()
	testenv.Must(t, err, "xrange dead")
	if len(dead) != 1 || dead[0].Values["id"] != "b" || dead[0].Values["error"] != "poison" || dead[0].Values["deliveries"] != "2" {
		t.Fatalf("dead stream: %+v", dead)
	}
	// Empty stream: Fetch returns nothing after Block, no error.
	got, err = s1.Fetch(ctx, 5)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty fetch: %v, %v", got, err)
	}
}

// MAXLEN ~ trims the stream.
func TestStreamMaxLen(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	prefix := testenv.Name("txbm") + ":"
	cleanup(t, rdb, prefix+"*")
	ctx := context.Background()
	p, err := redisx.NewStreamPublisher(rdb, redisx.StreamPublisherConfig{StreamPrefix: prefix, MaxLen: 10})
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
