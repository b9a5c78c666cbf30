package rabbitmq_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// amqpRead is what amqp091 sees of a delivery: its routing key, the
// properties the spec names, its headers (strings as they are), its body.
func amqpRead(d amqp.Delivery) testenv.WireRead {
	r := testenv.WireRead{"routing_key:routing_key": d.RoutingKey, "body:body": string(d.Body),
		"property:message_id": d.MessageId, "property:delivery_mode": strconv.Itoa(int(d.DeliveryMode))}
	if d.ContentType != "" {
		r["property:content_type"] = d.ContentType
	}
	if !d.Timestamp.IsZero() {
		r["property:timestamp"] = strconv.FormatInt(d.Timestamp.Unix(), 10)
	}
	for k, v := range d.Headers {
		s, _ := v.(string)
		r["header:"+k] = s
	}
	return r
}

// What the publisher puts on the wire, read with amqp091 alone, is what
// docs/reference/wire-format.json lists for RabbitMQ, field by field (with
// CloudEvents on and off for a message with a key and headers, off for a
// bare one), through an exchange with a routing-key prefix.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.RabbitMQ(t)
	ex := testenv.Name("wire-x")
	q := testenv.Name("wire")
	declare(t, url, q, ex, "shop.#")
	for _, tc := range []struct {
		m      txbox.Message
		source string
	}{
		{testenv.WireMessage("wire.full"), "/shop/orders"},
		{testenv.WireMessage("wire.plain"), ""},
		{testenv.WireBare("wire.bare"), ""},
	} {
		p, err := txboxrabbitmq.NewPublisher(testenv.RabbitMQConn(t, url), txboxrabbitmq.PublisherConfig{Exchange: ex, Prefix: "shop.", CloudEventsSource: tc.source})
		testenv.Must(t, err, "publisher")
		if errs := p.Publish(ctx, []txbox.Message{tc.m}); errs != nil {
			t.Fatalf("publish: %v", errs)
		}
		d, ok := get(t, url, q)
		if !ok {
			t.Fatal("nothing in the queue")
		}
		testenv.CheckWire(t, "rabbitmq", tc.m, "shop.", tc.source, tc.source != "", amqpRead(d))
	}
}

// A message published with amqp091 alone, as a service in another language
// would (message_id, content_type, Txbox-Key, typed and nested headers, and
// a Txbox-Deliveries of 99 and a Txbox-Topic that must steer nothing), is
// received by txbox's subscriber with its id, routing key as topic, key,
// created-at, content type and the headers as text (a table dropped); it
// counts 1 delivery and, after one Retry, 2.
func TestForeignProducer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.RabbitMQ(t)
	q := testenv.Name("foreign")
	declare(t, url, q, "")
	ch := channel(t, url)
	err := ch.PublishWithContext(ctx, "", q, true, false, amqp.Publishing{
		MessageId: "foreign-1", ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Timestamp: time.Unix(1700000000, 0), Body: []byte(`{"x":1}`),
		Headers: amqp.Table{
			txbox.HeaderKey: "k1", "X-Count": int32(7), "X-Flag": true, "X-Nested": amqp.Table{"a": "b"},
			txbox.HeaderDeliveries: "99", txbox.HeaderTopic: "forged.topic",
		}})
	testenv.Must(t, err, "publish")

	sub, err := txboxrabbitmq.NewSubscriber(testenv.RabbitMQConn(t, url), txboxrabbitmq.SubscriberConfig{})
	testenv.Must(t, err, "subscriber")
	s, err := sub.Subscribe(ctx, q, 1)
	testenv.Must(t, err, "subscribe")
	defer s.Close(ctx)
	next := func() txbox.Received {
		nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		d, err := s.Next(nctx)
		testenv.Must(t, err, "next")
		if d.Message().Deliveries == 1 {
			testenv.Must(t, d.Retry(ctx, 20*time.Millisecond), "retry")
		} else {
			testenv.Must(t, d.DeadLetter(ctx, errors.New("done")), "dead-letter")
		}
		return d.Message()
	}
	got := next()
	if got.ID != "foreign-1" || got.Topic != q || got.Key != "k1" || got.Deliveries != 1 ||
		!got.CreatedAt.Equal(time.Unix(1700000000, 0)) || string(got.Payload) != `{"x":1}` {
		t.Fatalf("received %+v; want deliveries 1 and topic %s whatever Txbox-Deliveries and Txbox-Topic say", got, q)
	}
	h := got.Headers
	if h["Content-Type"] != "application/json" || h["X-Count"] != "7" || h["X-Flag"] != "true" {
		t.Fatalf("headers %v", h)
	}
	for _, k := range []string{"X-Nested", txbox.HeaderDeliveries, txbox.HeaderTopic, txbox.HeaderKey} {
		if _, ok := h[k]; ok {
			t.Errorf("header %s kept: %v", k, h)
		}
	}
	if again := next(); again.Deliveries != 2 || again.Topic != q || again.Key != "k1" {
		t.Fatalf("after one retry: %+v; want deliveries 2", again)
	}
}
