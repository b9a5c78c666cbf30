package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
)

// What the publisher produces, read with franz-go alone, is what
// docs/reference/wire-format.json lists for Kafka, field by field (with CloudEvents
// on and off for a message with a key and headers, off for a bare one).
func TestWireFormat(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := cluster(t)
	for _, tc := range []struct {
		m      txbox.Message
		source string
	}{
		{testenv.WireMessage("full"), "/shop/orders"},
		{testenv.WireMessage("plain"), ""},
		{testenv.WireBare("bare"), ""},
	} {
		p, err := txboxkafka.NewPublisher(newClient(t, c), txboxkafka.PublisherConfig{Prefix: "shop.", CloudEventsSource: tc.source})
		testenv.Must(t, err, "publisher")
		if errs := p.Publish(ctx, []txbox.Message{tc.m}); errs != nil {
			t.Fatalf("publish: %v", errs)
		}
		cl := newClient(t, c, kgo.ConsumeTopics("shop."+tc.m.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var rec *kgo.Record
		for rec == nil {
			fs := cl.PollFetches(ctx)
			testenv.Must(t, ctx.Err(), "poll")
			fs.EachRecord(func(r *kgo.Record) { rec = r })
		}
		r := testenv.WireRead{"topic:topic": rec.Topic, "value:value": string(rec.Value)}
		if rec.Key != nil {
			r["key:key"] = string(rec.Key)
		}
		for _, h := range rec.Headers {
			r["header:"+h.Key] = string(h.Value)
		}
		testenv.CheckWire(t, "kafka", tc.m, "shop.", tc.source, tc.source != "", r)
	}
}

// A record produced with franz-go alone, as a service in another language
// would (record key, Txbox-Message-Id, Txbox-Created-At, a repeated header,
// and a Txbox-Deliveries of 99 that must steer nothing), is received by
// txbox's subscriber with its id, topic, key, created-at and the first
// value of the repeated header, delivered once; its retry copy counts 2.
func TestForeignProducer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := cluster(t)
	admin := newClient(t, c)
	createTopics(t, admin, "foreign", "foreign.dead")
	testenv.Must(t, admin.ProduceSync(ctx, &kgo.Record{Topic: "foreign", Key: []byte("k1"), Value: []byte(`{"x":1}`),
		Headers: []kgo.RecordHeader{
			{Key: txbox.HeaderMessageID, Value: []byte("foreign-1")},
			{Key: txbox.HeaderCreatedAt, Value: []byte("2026-01-02T03:04:05.000000006Z")},
			{Key: "X-Many", Value: []byte("first")}, {Key: "X-Many", Value: []byte("second")},
			{Key: txbox.HeaderDeliveries, Value: []byte("99")},
		}}).FirstErr(), "produce")
	s, err := txboxkafka.NewSubscriber(subClient(t, c), txboxkafka.SubscriberConfig{MaxRetryWait: 10 * time.Millisecond})
	testenv.Must(t, err, "subscriber")
	sub, err := s.Subscribe(ctx, txboxkafka.Binding("foreign", "g"), 1)
	testenv.Must(t, err, "subscribe")
	defer sub.Close(ctx)
	d, err := sub.Next(ctx)
	testenv.Must(t, err, "next")
	got := d.Message()
	if got.ID != "foreign-1" || got.Topic != "foreign" || got.Key != "k1" || got.Deliveries != 1 ||
		!got.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)) || got.Headers["X-Many"] != "first" {
		t.Fatalf("received %+v; want deliveries 1 whatever Txbox-Deliveries says", got)
	}
	testenv.Must(t, d.Retry(ctx, 0), "retry")
	d, err = sub.Next(ctx)
	testenv.Must(t, err, "next")
	if again := d.Message(); again.ID != "foreign-1" || again.Deliveries != 2 {
		t.Fatalf("retry copy: %+v; want deliveries 2", again)
	}
	testenv.Must(t, d.Ack(ctx), "ack")
}
