package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newBroker returns a fresh set of bindings on the shared NATS, RabbitMQ or
// Redis, or on an in-process Kafka.
func newBroker(t *testing.T, kind string) *broker {
	switch kind {
	case "nats":
		return natsBroker(t, testenv.NATS(t), 2*time.Second)
	case "redis":
		return redisBroker(t, 2*time.Second)
	case "kafka":
		return kafkaBroker(t, 3)
	}
	u := testenv.RabbitMQ(t)
	return rabbitBroker(t, u, u)
}

// brokers and databases of the end-to-end matrix.
var (
	e2eBrokers   = []string{"nats", "rabbitmq", "redis", "kafka"}
	e2eDatabases = []string{"pgx", "sqlite", "mysql"}
)

// TestEndToEnd: service A adds orders in transactions → relay → broker →
// service B's inbox handler writes a shipment row and adds shipment.created
// to its outbox in the same transaction → relay → handler C writes a
// notification row. Injected: B killed between commit and ACK, duplicate
// publishes, a poison message and a permanently bad one. Nothing is lost,
// nothing is applied twice, the poison and the bad message are
// dead-lettered while the rest flow.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	for _, kind := range e2eBrokers {
		for _, dbName := range e2eDatabases {
			t.Run(kind+"/"+dbName, func(t *testing.T) {
				t.Parallel()
				switch dbName {
				case "pgx":
					endToEnd(t, pgxDB(t, 20), newBroker(t, kind))
				case "sqlite":
					endToEnd(t, sqliteDB(t), newBroker(t, kind))
				case "mysql":
					endToEnd(t, mysqlDB(t), newBroker(t, kind))
				}
			})
		}
	}
}

func endToEnd[TTx any](t *testing.T, d db[TTx], b *broker) {
	ctx := context.Background()
	d.migrateAll(t, "a_outbox", "b_outbox")
	d.exec(t, "CREATE TABLE orders (id "+d.text()+" PRIMARY KEY)")
	// No unique constraints: a double application shows as a second row.
	d.exec(t, "CREATE TABLE shipments (order_id "+d.text()+" NOT NULL)")
	d.exec(t, "CREATE TABLE notified (shipment_id "+d.text()+" NOT NULL)")
	obA, err := txbox.New(d.drv, txbox.Config{Table: "a_outbox"})
	testenv.Must(t, err, "outbox a")
	obB, err := txbox.New(d.drv, txbox.Config{Table: "b_outbox"})
	testenv.Must(t, err, "outbox b")
	for _, table := range []string{"a_outbox", "b_outbox"} {
		r, err := relay.New(d.drv, b.pub, relay.Config{Table: table, PollInterval: 20 * time.Millisecond, DisableNotify: true, Logger: quiet})
		testenv.Must(t, err, "relay")
		testenv.Must(t, r.Start(ctx), "start relay")
		t.Cleanup(func() { _ = r.Stop(context.Background()) })
	}

	newConsumer := func(sub txbox.Subscriber) *consumer.Consumer[TTx] {
		c, err := consumer.New(d.drv, consumer.Config{Broker: sub, MaxDeliveries: 3,
			BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Logger: quiet})
		testenv.Must(t, err, "consumer.New")
		testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "shipping.order-created", Binding: b.binding("orders")},
			func(ctx context.Context, tx TTx, msg consumer.Message) error {
				id := string(msg.Payload)
				switch {
				case strings.HasPrefix(id, "poison"):
					return errors.New("cannot ship " + id)
				case strings.HasPrefix(id, "bad"):
					return consumer.Permanent(errors.New("malformed order " + id))
				}
				if _, err := d.drv.UnwrapTx(tx).Exec(ctx, "INSERT INTO shipments (order_id) VALUES ("+d.ph(1)+")", id); err != nil {
					return err
				}
				return testenv.Err(obB.Add(ctx, tx, txbox.Message{ID: "ship-" + id, Topic: b.topic("shipments"), Payload: []byte("ship-" + id)}))
			}), "register B")
		testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "notify.shipment-created", Binding: b.binding("shipments")},
			func(ctx context.Context, tx TTx, msg consumer.Message) error {
				_, err := d.drv.UnwrapTx(tx).Exec(ctx, "INSERT INTO notified (shipment_id) VALUES ("+d.ph(1)+")", string(msg.Payload))
				return err
			}), "register C")
		testenv.Must(t, c.Start(ctx), "start consumer")
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		return c
	}

	// The first consumer "dies" after committing 3 orders without ACKing.
	drop := &dropAcks{Subscriber: b.sub, binding: b.binding("orders")}
	drop.left.Store(3)
	c1 := newConsumer(drop)

	const n = 40
	orderMsg := func(id string) txbox.Message {
		return txbox.Message{ID: "order-" + id, Topic: b.topic("orders"), Payload: []byte(id)}
	}
	addOrders := func(ids ...string) {
		tx, dtx, err := d.drv.BeginTx(ctx)
		testenv.Must(t, err, "begin")
		for _, id := range ids {
			_, err := dtx.Exec(ctx, "INSERT INTO orders (id) VALUES ("+d.ph(1)+")", id)
			testenv.Must(t, err, "insert order")
			testenv.Must(t, testenv.Err(obA.Add(ctx, tx, orderMsg(id))), "add")
		}
		testenv.Must(t, dtx.Commit(ctx), "commit")
	}
	for i := 0; i < n; i += 2 {
		addOrders(fmt.Sprintf("o%03d", i), fmt.Sprintf("o%03d", i+1))
		if i == 10 {
			addOrders("poison-1", "bad-1")
		}
	}
	// Duplicate publishes of five orders, straight to the broker.
	var dups []txbox.Message
	for i := 0; i < 5; i++ {
		dups = append(dups, orderMsg(fmt.Sprintf("o%03d", i)))
	}
	for _, err := range b.pub.Publish(ctx, dups) {
		testenv.Must(t, err, "duplicate publish")
	}

	eventually(t, "3 ACKs dropped", func() bool { return drop.dropped.Load() == 3 })
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	testenv.Must(t, c1.Stop(stopCtx), "stop the first consumer")
	cancel()
	c2 := newConsumer(b.sub)

	distinct := func(table, col string) int64 {
		return d.count(t, "SELECT count(DISTINCT "+col+") FROM "+table)
	}
	eventually(t, "every order shipped and notified, poison and bad dead-lettered", func() bool {
		return distinct("shipments", "order_id") == n && distinct("notified", "shipment_id") == n &&
			len(b.deadLetters(t, "orders")) == 2
	})
	// The 3 orders committed without ACK come back and are recognised.
	eventually(t, "redeliveries recognised as duplicates", func() bool {
		return c1.Stats().Duplicates+c2.Stats().Duplicates >= 3
	})
	if rows := d.count(t, "SELECT count(*) FROM shipments"); rows != n {
		t.Fatalf("%d shipment rows for %d orders: applied twice", rows, n)
	}
	if rows := d.count(t, "SELECT count(*) FROM notified"); rows != n {
		t.Fatalf("%d notification rows for %d shipments: applied twice", rows, n)
	}
	if rows := d.count(t, "SELECT count(*) FROM shipments WHERE order_id IN ('poison-1', 'bad-1')"); rows != 0 {
		t.Fatalf("a failed message left %d shipment rows", rows)
	}
	dl := b.deadLetters(t, "orders")
	errHeader, delHeader := b.errHeader, b.delHeader
	poison, bad := dl["order-poison-1"], dl["order-bad-1"]
	if !strings.Contains(poison[errHeader], "cannot ship poison-1") {
		t.Fatalf("poison dead letter lacks its error: %v", poison)
	}
	// On Kafka the dead letter's count is the broker deliveries that the
	// member which dead-lettered it saw: a record re-read after a partition
	// moved starts again (the consumer still dead-letters after
	// MaxDeliveries of its own failures). A known gap, see docs/guide/consumer.md.
	minDeliveries := 3
	if b.name == "kafka" {
		minDeliveries = 1
	}
	if nd, _ := strconv.Atoi(poison[delHeader]); nd < minDeliveries {
		t.Fatalf("poison dead-lettered after %q deliveries, want >= %d (MaxDeliveries)", poison[delHeader], minDeliveries)
	}
	if !strings.Contains(bad[errHeader], "malformed order") {
		t.Fatalf("permanent failure dead letter lacks its error: %v", bad)
	}
	// Each failed message is dead-lettered once; on Kafka, the records the
	// first consumer dead-lettered after its unACKed ones come back to the
	// second and may be dead-lettered again (docs/guide/consumer.md), always
	// under the same id.
	st1, st2 := c1.Stats(), c2.Stats()
	if n := st1.DeadLettered + st2.DeadLettered; n != 2 && !(b.rereads && n > 2) {
		t.Fatalf("dead-lettered %d+%d, want 2", st1.DeadLettered, st2.DeadLettered)
	}
	if !b.dedupes {
		// RabbitMQ, Redis and Kafka do not dedupe: the 5 duplicate
		// publishes reached the inbox, on top of the 3 redeliveries.
		eventually(t, "duplicate publishes recognised", func() bool {
			return c1.Stats().Duplicates+c2.Stats().Duplicates >= 8
		})
	}
	t.Logf("%s: consumer 1 %+v, consumer 2 %+v", b.name, c1.Stats(), c2.Stats())
}
