package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// declare declares queue q with txboxrabbitmq.DeclareQueue, bound to the topic
// exchange ex with keys, and deletes them (and what DeclareQueue created
// around q) when the test ends.
func declare(t *testing.T, url, q, ex string, keys ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, n := range []string{q, q + ".retry", q + ".dlq"} {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
		_ = ch.ExchangeDelete(q+".dlx", false, false)
		_ = ch.ExchangeDelete(ex, false, false)
	})
	testenv.Must(t, txboxrabbitmq.DeclareQueue(ctx, testenv.RabbitMQConn(t, url), txboxrabbitmq.QueueConfig{Name: q, Exchange: ex, RoutingKeys: keys}), "declare %s", q)
}

func delivery(d amqp.Delivery) brokertest.Delivery {
	out := brokertest.Delivery{ID: d.MessageId, Payload: d.Body, Headers: map[string]string{}}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			out.Headers[k] = s
		} else {
			out.Headers[k] = fmt.Sprint(v)
		}
	}
	return out
}

// reader consumes queue q with one consumer, so that deliveries come in
// the queue's (FIFO) order, and collects them by routing key (the topic).
func reader(t *testing.T, url, q string) *brokertest.Collector {
	t.Helper()
	conn, err := amqp.Dial(url)
	testenv.Must(t, err, "dial")
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(256, 0, false)
	}
	testenv.Must(t, err, "channel")
	ds, err := ch.Consume(q, "", false, true, false, false, nil)
	testenv.Must(t, err, "consume %s", q)
	c := brokertest.NewCollector()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range ds {
			c.Add(d.RoutingKey, delivery(d))
			_ = d.Ack(false)
		}
	}()
	t.Cleanup(func() {
		_ = conn.Close()
		<-done
	})
	return c
}

// suite gives each test a topic exchange of its own and a queue bound to
// every suite topic (brokertest.TopicPrefix+"#") on it, declared before the
// publisher sends anything.
func suite(t *testing.T) (brokertest.NewFunc, brokertest.Features) {
	url := testenv.RabbitMQ(t)
	f := brokertest.Features{
		// No broker-side dedupe by message_id: both copies of a re-publish
		// arrive, carrying the id for the consumer's inbox.
		Dedupe: false,
		// One queue, one consumer: RabbitMQ delivers in the order the
		// publisher's single confirm channel sent, and Publish calls run
		// one at a time.
		PerKeyOrder: true,
		Headers:     true,
		// A routing key no queue is bound to: mandatory publishing gets it
		// back (basic.return), which the publisher reports as rejected.
		Reject: func(t *testing.T, topic string) txbox.Message {
			return txbox.Message{ID: "rejected-" + topic, Topic: "unrouted." + topic, Payload: []byte("x")}
		},
	}
	return func(t *testing.T) (txbox.Publisher, brokertest.Reader) {
		ex, q := testenv.Name("btx"), testenv.Name("btq")
		declare(t, url, q, ex, brokertest.TopicPrefix+"#")
		p, err := txboxrabbitmq.NewPublisher(testenv.RabbitMQConn(t, url), txboxrabbitmq.PublisherConfig{Exchange: ex})
		testenv.Must(t, err, "publisher")
		t.Cleanup(func() { _ = p.Close() })
		return p, reader(t, url, q)
	}, f
}

func TestConformance(t *testing.T) {
	t.Parallel()
	newPub, f := suite(t)
	brokertest.TestPublisher(t, newPub, f)
}

func TestConformanceRelay(t *testing.T) {
	t.Parallel()
	newPub, f := suite(t)
	brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, f)
}

// The binding is a queue of the test's own, declared with DeclareQueue and
// bound to the topic on an exchange of the test's own; its dead letters
// land in <queue>.dlq.
func TestSubscriberConformance(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	sub, err := txboxrabbitmq.NewSubscriber(testenv.RabbitMQConn(t, url), txboxrabbitmq.SubscriberConfig{})
	testenv.Must(t, err, "subscriber")
	brokertest.TestSubscriber(t, func(t *testing.T, topic string) (txbox.Publisher, txbox.Subscriber, string) {
		ex, q := testenv.Name("btsx"), testenv.Name("btsq")
		declare(t, url, q, ex, topic)
		p, err := txboxrabbitmq.NewPublisher(testenv.RabbitMQConn(t, url), txboxrabbitmq.PublisherConfig{Exchange: ex})
		testenv.Must(t, err, "publisher")
		t.Cleanup(func() { _ = p.Close() })
		return p, sub, q
	}, brokertest.SubscriberFeatures{
		ReadDead: func(t *testing.T, binding string) []string {
			ch := channel(t, url)
			var ids []string
			for {
				d, ok, err := ch.Get(binding+".dlq", true)
				testenv.Must(t, err, "get %s.dlq", binding)
				if !ok {
					return ids
				}
				ids = append(ids, d.MessageId)
			}
		},
		// With <queue>.dlq gone, <queue>.dlx routes a dead letter nowhere.
		BreakDeadLetters: func(t *testing.T, binding string) {
			_, err := channel(t, url).QueueDelete(binding+".dlq", false, false, false)
			testenv.Must(t, err, "delete %s.dlq", binding)
		},
	})
}

// channel returns a channel on a connection of its own, closed when the
// test ends.
func channel(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	testenv.Must(t, err, "dial")
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	testenv.Must(t, err, "channel")
	return ch
}
