package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// TestDeadLetterKilledMidwayKeepsOneCopy kills the subscriber's connection
// at each point of a DeadLetter (before each method frame it sends, and
// before each reply of the broker it would hear), lets the message come
// back and dead-letters it again: the dead-letter queue holds exactly one
// copy, and the queue none, whatever the point.
func TestDeadLetterKilledMidwayKeepsOneCopy(t *testing.T) {
	t.Parallel()
	forEachCut(t, "dlcut", func(t *testing.T, base, q string, admin *amqp.Channel, sub *txboxrabbitmq.Subscriber) {
		// The message is back if the cut undid the dead letter: it is
		// dead-lettered again, with nothing cut.
		if st, err := admin.QueueDeclarePassive(q, true, false, false, false, nil); err == nil && st.Messages > 0 {
			d := nextOf(t, sub, q)
			testenv.Must(t, d.close(func(d txbox.Delivery) error { return d.DeadLetter(context.Background(), errors.New("poison")) }), "dead-letter again")
			waitNoConsumer(t, admin, q)
		}
		var ids []string
		for {
			m, ok, err := admin.Get(q+".dlq", true)
			testenv.Must(t, err, "get %s.dlq", q)
			if !ok {
				break
			}
			ids = append(ids, m.MessageId)
		}
		st, err := admin.QueueDeclarePassive(q, true, false, false, false, nil)
		testenv.Must(t, err, "inspect %s", q)
		if len(ids) != 1 || ids[0] != "poison-1" || st.Messages != 0 {
			t.Fatalf("dead letters %v and %d message(s) left in the queue, want exactly [poison-1] and 0", ids, st.Messages)
		}
	}, nil)
}

// TestDeadLetterWithoutItsQueueKeepsTheMessage deletes <queue>.dlq, then
// kills the subscriber's connection at each point of a DeadLetter, as
// TestDeadLetterKilledMidwayKeepsOneCopy does: the message is never lost,
// it is in the queue or in <queue>.retry (twice at most) whatever the point.
func TestDeadLetterWithoutItsQueueKeepsTheMessage(t *testing.T) {
	t.Parallel()
	forEachCut(t, "dlnoq", func(t *testing.T, base, q string, admin *amqp.Channel, sub *txboxrabbitmq.Subscriber) {
		// <queue>.retry first: a copy expiring from it into the queue
		// meanwhile is counted twice, never missed.
		retry, err := admin.QueueDeclarePassive(q+".retry", true, false, false, false, nil)
		testenv.Must(t, err, "inspect %s.retry", q)
		st, err := admin.QueueDeclarePassive(q, true, false, false, false, nil)
		testenv.Must(t, err, "inspect %s", q)
		t.Logf("%d in %s.retry, %d in %s", retry.Messages, q, st.Messages, q)
		if retry.Messages+st.Messages == 0 {
			t.Fatalf("poison-1 is lost: neither %s nor %s.retry holds it", q, q)
		}
	}, func(t *testing.T, admin *amqp.Channel, q string) {
		_, err := admin.QueueDelete(q+".dlq", false, false, false)
		testenv.Must(t, err, "delete %s.dlq", q)
	})
}

// forEachCut runs a subtest per point of a DeadLetter at which the
// connection can be cut (before each method frame of either side, the
// first 8 of each): it declares a queue (then runs prepare, if not nil),
// publishes poison-1 to it, dead-letters its delivery through a proxy
// that cuts there, waits until the broker has closed the cut connection,
// and runs check.
func forEachCut(t *testing.T, prefix string, check func(t *testing.T, base, q string, admin *amqp.Channel, sub *txboxrabbitmq.Subscriber), prepare func(t *testing.T, admin *amqp.Channel, q string)) {
	base := testenv.RabbitMQ(t)
	type point struct {
		fromClient bool
		n          int
	}
	var points []point
	for n := 1; n <= 8; n++ {
		points = append(points, point{true, n}, point{false, n})
	}
	for _, pt := range points {
		side := "broker"
		if pt.fromClient {
			side = "client"
		}
		t.Run(fmt.Sprintf("before_%s_frame_%d", side, pt.n), func(t *testing.T) {
			t.Parallel()
			q := testenv.Name(prefix)
			declare(t, base, q, "")
			admin := channel(t, base)
			if prepare != nil {
				prepare(t, admin, q)
			}
			testenv.Must(t, admin.PublishWithContext(context.Background(), "", q, true, false, amqp.Publishing{
				MessageId: "poison-1", DeliveryMode: amqp.Persistent, Body: []byte("x")}), "publish")

			p := newCutProxy(t, testenv.Target(base))
			u, err := url.Parse(base)
			testenv.Must(t, err, "parse %s", base)
			u.Host = p.addr()
			sub, err := txboxrabbitmq.NewSubscriber(testenv.RabbitMQConn(t, u.String()), txboxrabbitmq.SubscriberConfig{ReconnectMax: 100 * time.Millisecond})
			testenv.Must(t, err, "subscriber")

			d := nextOf(t, sub, q)
			p.arm(pt.fromClient, pt.n)
			derr := d.close(func(d txbox.Delivery) error { return d.DeadLetter(context.Background(), errors.New("poison")) })
			cut, frames := p.disarm()
			t.Logf("cut %v after %s; DeadLetter: %v", cut, strings.Join(frames, ", "), derr)
			waitNoConsumer(t, admin, q)
			check(t, base, q, admin, sub)
		})
	}
}

// openDelivery is a delivery with the subscription it came from.
type openDelivery struct {
	txbox.Delivery
	s txbox.Subscription
}

// close settles the delivery with settle, then closes its subscription.
func (d openDelivery) close(settle func(txbox.Delivery) error) error {
	err := settle(d.Delivery)
	_ = d.s.Close(context.Background())
	return err
}

// nextOf subscribes to q and returns its next delivery.
func nextOf(t *testing.T, sub *txboxrabbitmq.Subscriber, q string) openDelivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sub.Subscribe(ctx, q, 1)
	testenv.Must(t, err, "subscribe %s", q)
	d, err := s.Next(ctx)
	testenv.Must(t, err, "next from %s", q)
	return openDelivery{Delivery: d, s: s}
}

// waitNoConsumer waits until the broker has no consumer on q: it has
// closed the channels of a cut connection and requeued what they held
// unacked.
func waitNoConsumer(t *testing.T, ch *amqp.Channel, q string) {
	t.Helper()
	for i := 0; ; i++ {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		testenv.Must(t, err, "inspect %s", q)
		if st.Consumers == 0 {
			return
		}
		if i == 600 {
			t.Fatalf("%s still has %d consumer(s) after its connection was cut", q, st.Consumers)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
