package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// A queue declared by another tool with arguments of its own: DeclareQueue
// refuses it (ErrQueueArguments) before creating anything, CheckBinding
// advises Adopt (which works) rather than a plain DeclareQueue (which
// cannot), and with Adopt the Subscriber retries and dead-letters on it.
func TestDeclareQueueAdopt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.RabbitMQ(t)
	conn := testenv.RabbitMQConn(t, url)
	q := testenv.Name("adopt")
	ch := channel(t, url)
	_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-max-length": int32(1000)})
	testenv.Must(t, err, "declare foreign queue")
	t.Cleanup(func() {
		ch := channel(t, url)
		for _, n := range []string{q, q + ".retry", q + ".dlq"} {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
		_ = ch.ExchangeDelete(q+".dlx", false, false)
	})

	err = txboxrabbitmq.DeclareQueue(ctx, conn, txboxrabbitmq.QueueConfig{Name: q})
	if !errors.Is(err, txboxrabbitmq.ErrQueueArguments) || !strings.Contains(err.Error(), "Adopt") {
		t.Fatalf("DeclareQueue on a foreign queue: %v; want ErrQueueArguments naming Adopt", err)
	}
	if _, err := channel(t, url).QueueDeclarePassive(q+".dlq", true, false, false, false, nil); err == nil {
		t.Fatal("the refused DeclareQueue created the dead-letter queue")
	}
	sub, err := txboxrabbitmq.NewSubscriber(conn, txboxrabbitmq.SubscriberConfig{})
	testenv.Must(t, err, "subscriber")
	err = sub.CheckBinding(ctx, q)
	if err == nil || !strings.Contains(err.Error(), "Adopt: true") {
		t.Fatalf("CheckBinding on the foreign queue: %v; want advice to adopt it", err)
	}

	testenv.Must(t, txboxrabbitmq.DeclareQueue(ctx, conn, txboxrabbitmq.QueueConfig{Name: q, Adopt: true}), "adopt")
	testenv.Must(t, txboxrabbitmq.DeclareQueue(ctx, conn, txboxrabbitmq.QueueConfig{Name: q, Adopt: true}), "adopt again")
	testenv.Must(t, sub.CheckBinding(ctx, q), "CheckBinding after adopting")

	pub, err := txboxrabbitmq.NewPublisher(conn, txboxrabbitmq.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	id := testenv.Name("id")
	if errs := pub.Publish(ctx, []txbox.Message{{ID: id, Topic: q, Payload: []byte("p")}}); errs != nil {
		t.Fatalf("publish: %v", errs)
	}
	s, err := sub.Subscribe(ctx, q, 1)
	testenv.Must(t, err, "subscribe")
	defer s.Close(ctx)
	next := func() txbox.Delivery {
		nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		d, err := s.Next(nctx)
		testenv.Must(t, err, "next")
		return d
	}
	d := next()
	testenv.Must(t, d.Retry(ctx, 50*time.Millisecond), "retry")
	d = next()
	if m := d.Message(); m.ID != id || m.Topic != q || m.Deliveries != 2 {
		t.Fatalf("retried delivery: id %q topic %q deliveries %d", m.ID, m.Topic, m.Deliveries)
	}
	testenv.Must(t, d.DeadLetter(ctx, errors.New("boom")), "dead-letter")
	dl, ok := get(t, url, q+".dlq")
	if !ok || dl.MessageId != id || dl.Headers[txbox.HeaderError] != "boom" {
		t.Fatalf("dead letter: %v %q %v", ok, dl.MessageId, dl.Headers)
	}
}
