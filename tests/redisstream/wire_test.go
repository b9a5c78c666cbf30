package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
)

// What the publisher appends, read with go-redis alone (XRANGE), is what
// docs/reference/wire-format.json lists for Redis Streams, field by field.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txwire") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	for _, m := range []txbox.Message{testenv.WireMessage("full"), testenv.WireBare("bare")} {
		if errs := p.Publish(ctx, []txbox.Message{m}); errs != nil {
			t.Fatalf("publish: %v", errs)
		}
		stream := prefix + m.Topic
		es, err := rdb.XRange(ctx, stream, "-", "+").Result()
		testenv.Must(t, err, "XRANGE")
		if len(es) != 1 {
			t.Fatalf("%d entries in %s", len(es), stream)
		}
		r := testenv.WireRead{"stream:stream": stream}
		for k, v := range es[0].Values {
			r["field:"+k], _ = v.(string)
		}
		testenv.CheckWire(t, "redisstream", m, prefix, "", false, r)
	}
}

// An entry appended with go-redis alone, as a service in another language
// would (id, key, created_at, payload, h: headers, an h:Txbox-Deliveries
// of 99), is received by txbox's subscriber with its id, stream as topic,
// key, created-at and headers, delivered once.
func TestForeignProducer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txforeign") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	stream := prefix + "orders"
	testenv.Must(t, redisstream.EnsureGroup(ctx, rdb, stream, "g", "0"), "group")
	testenv.Must(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{
		"id", "foreign-1", "key", "k1", "payload", `{"x":1}`, "created_at", "2026-01-02T03:04:05.000000006Z",
		"h:Content-Type", "application/json", "h:" + txbox.HeaderDeliveries, "99"}}).Err(), "XADD")
	s, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: "c1", Block: 50 * time.Millisecond})
	testenv.Must(t, err, "subscriber")
	sub, err := s.Subscribe(ctx, redisstream.Binding(stream, "g"), 1)
	testenv.Must(t, err, "subscribe")
	defer sub.Close(ctx)
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := sub.Next(nctx)
	testenv.Must(t, err, "next")
	got := d.Message()
	if got.ID != "foreign-1" || got.Topic != stream || got.Key != "k1" || got.Deliveries != 1 ||
		!got.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)) || string(got.Payload) != `{"x":1}` ||
		got.Headers["Content-Type"] != "application/json" {
		t.Fatalf("received %+v", got)
	}
	testenv.Must(t, d.Ack(ctx), "ack")
}
