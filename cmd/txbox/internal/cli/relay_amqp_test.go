package cli_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// amqpQueue declares a queue of its own on the shared RabbitMQ, bound to
// exchange with key when exchange is set, and returns a function that
// reads every message in it (basic.get).
func amqpQueue(t *testing.T, exchange, key string) (string, func() []amqp.Delivery) {
	t.Helper()
	conn, err := amqp.Dial(testenv.RabbitMQ(t))
	testenv.Must(t, err, "dial RabbitMQ")
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	testenv.Must(t, err, "channel")
	q := testenv.Name("txcli-amqp")
	_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	testenv.Must(t, err, "declare queue")
	t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	if exchange != "" {
		testenv.Must(t, ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil), "declare exchange")
		t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
		testenv.Must(t, ch.QueueBind(q, key, exchange, false, nil), "bind")
	}
	var got []amqp.Delivery
	return q, func() []amqp.Delivery {
		for {
			d, ok, err := ch.Get(q, true)
			testenv.Must(t, err, "basic.get")
			if !ok {
				return got
			}
			got = append(got, d)
		}
	}
}

// `txbox relay --broker amqp://…` delivers rows written with plain SQL to a
// RabbitMQ queue: through the default exchange (routing key = topic = the
// queue's name), and through --exchange with --subject-prefix before the
// topic. Each message is persistent, with message_id = the row's id and
// Txbox-Created-At = the row's created_at.
func TestRelayRabbitMQ(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t)
	t.Run("default exchange", func(t *testing.T) {
		t.Parallel()
		q, read := amqpQueue(t, "", "")
		dbURL, insert, pending := sqliteOutbox(t)
		// The rows' created_at is stamped by SQLite's clock, in ms.
		before := time.Now().Add(-time.Millisecond)
		for range 3 {
			insert(q)
		}
		inserted := time.Now()
		logs, stop := relayCmd(t, "--db", dbURL, "--broker", url, "--poll-interval", "20ms", "--stats-interval", "0")
		waitFor(t, "3 rows delivered", func() bool { return pending() == 0 && len(read()) == 3 }, logs)
		testenv.Must(t, stop(), "relay")
		ids := map[string]bool{}
		for _, d := range read() {
			if string(d.Body) != "x" || d.DeliveryMode != amqp.Persistent || d.RoutingKey != q || d.Exchange != "" {
				t.Errorf("delivery: body %q mode %d exchange %q key %q", d.Body, d.DeliveryMode, d.Exchange, d.RoutingKey)
			}
			ids[d.MessageId] = true
			// The relay carries the row's created_at (docs/reference/wire-format.md).
			created, _ := d.Headers[txbox.HeaderCreatedAt].(string)
			at, err := time.Parse(time.RFC3339Nano, created)
			if err != nil || at.Before(before) || at.After(inserted) || len(created) != len("2006-01-02T15:04:05.000000000Z") {
				t.Errorf("%s %q: want the row's created_at, RFC 3339 UTC with nine digits (%v)", txbox.HeaderCreatedAt, created, err)
			}
		}
		if len(ids) != 3 || ids[""] {
			t.Errorf("message ids %v: want 3 distinct", ids)
		}
		if !strings.Contains(logs.String(), "broker=amqp://") {
			t.Errorf("stderr does not name the broker:\n%s", logs.String())
		}
	})
	t.Run("exchange and prefix", func(t *testing.T) {
		t.Parallel()
		exchange := testenv.Name("txcli-x")
		_, read := amqpQueue(t, exchange, "shop.order.*")
		dbURL, insert, pending := sqliteOutbox(t)
		insert("order.placed")
		insert("nobody.listens") // routed nowhere: mandatory, so rejected
		logs, stop := relayCmd(t, "--db", dbURL, "--broker", url, "--exchange", exchange, "--subject-prefix", "shop.",
			"--max-attempts", "1", "--poll-interval", "20ms", "--stats-interval", "0")
		dead := func() int {
			db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(strings.TrimPrefix(dbURL, "sqlite://")))
			testenv.Must(t, err, "open sqlite")
			defer db.Close()
			var n int
			testenv.Must(t, db.QueryRow(`SELECT count(*) FROM txbox_outbox WHERE dead_at IS NOT NULL AND topic = 'nobody.listens'`).Scan(&n), "count")
			return n
		}
		waitFor(t, "the routed row delivered, the other dead", func() bool { return pending() == 1 && dead() == 1 && len(read()) == 1 }, logs)
		testenv.Must(t, stop(), "relay")
		if d := read()[0]; d.RoutingKey != "shop.order.placed" || d.Exchange != exchange {
			t.Errorf("delivery: exchange %q routing key %q", d.Exchange, d.RoutingKey)
		}
	})
	t.Run("missing exchange", func(t *testing.T) {
		t.Parallel()
		dbURL, _, _ := sqliteOutbox(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _, err := run(ctx, "relay", "--db", dbURL, "--broker", url, "--exchange", testenv.Name("txcli-none"), "--stats-interval", "0")
		if err == nil || !strings.Contains(err.Error(), "declare it first") {
			t.Fatalf("relay with a missing exchange: %v", err)
		}
	})
}
