package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// natsRead is what nats.go sees of a message: its subject, each header's
// first value, its data.
func natsRead(m *nats.Msg) testenv.WireRead {
	r := testenv.WireRead{"subject:subject": m.Subject, "data:data": string(m.Data)}
	for k, v := range m.Header {
		r["header:"+k] = v[0]
	}
	return r
}

// What the publisher puts on the wire, read with nats.go alone, is what
// docs/reference/wire-format.json lists for NATS, field by field: for a message with
// a key and headers (its content type named in lower case) with CloudEvents
// on and off, and for a bare one with CloudEvents off.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, nc := privateNATS(t)
	sub, err := nc.SubscribeSync("big.>")
	testenv.Must(t, err, "subscribe")
	for _, tc := range []struct {
		m      txbox.Message
		source string
	}{
		{testenv.WireMessage("wire.full"), "/shop/orders"},
		{testenv.WireMessage("wire.plain"), ""},
		{testenv.WireBare("wire.bare"), ""},
	} {
		p := newPublisher(t, nc, natsjs.PublisherConfig{Prefix: "big.", CloudEventsSource: tc.source})
		if errs := p.Publish(ctx, []txbox.Message{tc.m}); errs != nil {
			t.Fatalf("publish: %v", errs)
		}
		m, err := sub.NextMsg(5 * time.Second)
		testenv.Must(t, err, "read")
		testenv.CheckWire(t, "nats", tc.m, "big.", tc.source, tc.source != "", natsRead(m))
	}
}

// A message published with nats.go alone, as a service in another language
// would (Nats-Msg-Id, Txbox-Key, Txbox-Created-At, a Content-Type, a
// repeated header, and Txbox-Deliveries/Txbox-Topic that must steer
// nothing), is received by txbox's subscriber with its id, subject, key,
// created-at and headers (the first value of a repeated one), delivered
// once.
func TestForeignProducer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, nc := privateNATS(t)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	durable := testenv.Name("wire")
	testenv.Must(t, testenv.Err(natsjs.EnsureConsumer(ctx, nc, "BIG", natsjs.ConsumerConfig{Durable: durable, FilterSubjects: []string{"big.foreign"}})), "consumer")
	msg := nats.NewMsg("big.foreign")
	msg.Data = []byte(`{"x":1}`)
	msg.Header.Set(jetstream.MsgIDHeader, "foreign-1")
	msg.Header.Set(txbox.HeaderKey, "k1")
	msg.Header.Set(txbox.HeaderCreatedAt, "2026-01-02T03:04:05.000000006Z")
	msg.Header.Set("Content-Type", "application/json")
	msg.Header.Add("X-Many", "first")
	msg.Header.Add("X-Many", "second")
	msg.Header.Set(txbox.HeaderDeliveries, "99")
	msg.Header.Set(txbox.HeaderTopic, "forged.topic")
	_, err = js.PublishMsg(ctx, msg)
	testenv.Must(t, err, "publish")

	s, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{})
	testenv.Must(t, err, "subscriber")
	subn, err := s.Subscribe(ctx, natsjs.Binding("BIG", durable), 1)
	testenv.Must(t, err, "subscribe")
	defer subn.Close(ctx)
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := subn.Next(nctx)
	testenv.Must(t, err, "next")
	got := d.Message()
	want := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	if got.ID != "foreign-1" || got.Topic != "big.foreign" || got.Key != "k1" || !got.CreatedAt.Equal(want) ||
		got.Deliveries != 1 || string(got.Payload) != `{"x":1}` {
		t.Fatalf("received %+v", got)
	}
	if got.Headers["Content-Type"] != "application/json" || got.Headers["X-Many"] != "first" {
		t.Fatalf("headers %v", got.Headers)
	}
	if _, ok := got.Headers[txbox.HeaderKey]; ok {
		t.Fatalf("Txbox-Key left in the headers: %v", got.Headers)
	}
	testenv.Must(t, d.Ack(ctx), "ack")
}
