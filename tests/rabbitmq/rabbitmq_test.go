package rabbitmq_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxrabbitmq"
	"github.com/txbox/txbox/txboxsql"
)

func queue(t *testing.T, url string) string {
	t.Helper()
	q := testenv.Name("pq")
	testenv.Must(t, txboxrabbitmq.DeclareQueue(context.Background(), testenv.RabbitMQConn(t, url), txboxrabbitmq.QueueConfig{Name: q}), "declare")
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, _ := conn.Channel()
		for _, n := range []string{q, q + ".retry", q + ".dlq"} {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
		_ = ch.ExchangeDelete(q+".dlx", false, false)
	})
	return q
}

func get(t *testing.T, url, q string) (amqp.Delivery, bool) {
	t.Helper()
	conn, err := amqp.Dial(url)
	testenv.Must(t, err, "dial")
	defer conn.Close()
	ch, err := conn.Channel()
	testenv.Must(t, err, "channel")
	d, ok, err := ch.Get(q, true)
	testenv.Must(t, err, "get")
	return d, ok
}

// A routed message arrives persistent, with message_id = the message id
// that no header can override, and its headers; an unroutable one in the
// same batch is a message-specific failure (txbox.Reject), the others are
// unaffected.
func TestPublisherConfirmsAndMandatory(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	q := queue(t, url)
	p, err := txboxrabbitmq.NewPublisher(testenv.RabbitMQConn(t, url), txboxrabbitmq.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	defer p.Close()
	errs := p.Publish(context.Background(), []txbox.Message{
		{ID: "id-1", Topic: q, Payload: []byte("one"), Headers: map[string]string{"trace": "abc", "message_id": "forged"}},
		{ID: "id-2", Topic: testenv.Name("nowhere"), Payload: []byte("lost")},
		{ID: "id-3", Topic: q, Payload: []byte("three")},
	})
	if errs == nil || errs[0] != nil || errs[2] != nil {
		t.Fatalf("errs = %v; want only the unroutable message to fail", errs)
	}
	if !txbox.IsRejected(errs[1]) {
		t.Fatalf("unroutable message: %v; want a txbox.Reject error", errs[1])
	}
	d, ok := get(t, url, q)
	if !ok {
		t.Fatal("queue is empty")
	}
	if d.MessageId != "id-1" || string(d.Body) != "one" || d.Headers["trace"] != "abc" || d.DeliveryMode != amqp.Persistent {
		t.Fatalf("got id %q body %q headers %v mode %d", d.MessageId, d.Body, d.Headers, d.DeliveryMode)
	}
	if _, forged := d.Headers["message_id"]; forged {
		t.Fatal("a header named message_id was sent")
	}

	// Returns are matched by id and routing key: an unroutable message
	// without an id is reported, and of two copies of one id only the
	// unroutable one is.
	nowhere := testenv.Name("nowhere")
	errs = p.Publish(context.Background(), []txbox.Message{
		{Topic: nowhere, Payload: []byte("no id")},
		{ID: "twin", Topic: q, Payload: []byte("routed")},
		{ID: "twin", Topic: nowhere, Payload: []byte("unrouted")},
		{Topic: q, Payload: []byte("no id, routed")},
	})
	if errs == nil || !txbox.IsRejected(errs[0]) || errs[1] != nil || !txbox.IsRejected(errs[2]) || errs[3] != nil {
		t.Fatalf("errs = %v; want the two unroutable messages rejected, the routed ones not", errs)
	}
}

// A lost connection is transient (never txbox.Reject), and the publisher
// reconnects on its own once the broker is reachable again.
func TestPublisherOutageIsTransient(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	q := queue(t, url)
	proxy := testenv.NewProxy(t, testenv.Target(url))
	conn, err := txboxrabbitmq.NewConn("amqp://guest:guest@"+proxy.Addr()+"/", txboxrabbitmq.ConnConfig{DialTimeout: time.Second})
	testenv.Must(t, err, "conn")
	defer conn.Close()
	p, err := txboxrabbitmq.NewPublisher(conn, txboxrabbitmq.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	defer p.Close()
	msg := []txbox.Message{{ID: "a", Topic: q, Payload: []byte("x")}}
	if errs := p.Publish(context.Background(), msg); errs != nil {
		t.Fatalf("publish: %v", errs)
	}
	proxy.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	errs := p.Publish(ctx, []txbox.Message{{ID: "b", Topic: q, Payload: []byte("x")}})
	cancel()
	if errs == nil || errs[0] == nil {
		t.Fatal("publish through a cut connection succeeded")
	}
	if txbox.IsRejected(errs[0]) {
		t.Fatalf("an outage was reported as the message's fault: %v", errs[0])
	}
	proxy.Resume()
	testenv.Await(t, "a publish after the outage", func() (bool, string) {
		errs := p.Publish(context.Background(), []txbox.Message{{ID: "b", Topic: q, Payload: []byte("x")}})
		if errs == nil {
			return true, ""
		}
		if txbox.IsRejected(errs[0]) {
			t.Fatalf("after the outage: %v", errs[0])
		}
		return false, errs[0].Error()
	})
}

// Through the relay: an unroutable message is parked dead after MaxAttempts
// while a routable one in the same outbox is delivered.
func TestRelayParksUnroutable(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	q := queue(t, url)
	db := testenv.SQLite(t)
	drv := txboxsql.New(db, txboxdriver.SQLite)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "outbox")
	testenv.Must(t, testenv.Err(ob.AddNoTx(context.Background(),
		txbox.Message{ID: "ok", Topic: q, Payload: []byte("x")},
		txbox.Message{ID: "nowhere", Topic: testenv.Name("nowhere"), Payload: []byte("y")})), "add")
	p, err := txboxrabbitmq.NewPublisher(testenv.RabbitMQConn(t, url), txboxrabbitmq.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	defer p.Close()
	r, err := relay.New(drv, p, relaytest.With(relay.Config{PollInterval: 10 * time.Millisecond, MaxAttempts: 2,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, relaytest.Config{RetryDelay: 10 * time.Millisecond}))
	testenv.Must(t, err, "relay")
	testenv.Must(t, r.Start(context.Background()), "start")
	defer r.Stop(context.Background())
	testenv.Await(t, "the unroutable message dead and the other delivered", func() (bool, string) {
		var dead, published int
		testenv.Must(t, db.QueryRow(`SELECT count(*) FILTER (WHERE dead_at IS NOT NULL AND message_id = 'nowhere'),
			count(*) FILTER (WHERE published_at IS NOT NULL AND message_id = 'ok') FROM txbox_outbox`).Scan(&dead, &published), "count")
		return dead == 1 && published == 1, fmt.Sprintf("dead %d, published %d", dead, published)
	})
	if d, ok := get(t, url, q); !ok || d.MessageId != "ok" {
		t.Fatalf("queue holds %q (ok %v), want the routable message", d.MessageId, ok)
	}
}
