package consumer_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxrabbitmq"
	"github.com/txbox/txbox/txboxsql"
)

// eventually waits for cond (testenv.Await with nothing to show).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Await(t, what, func() (bool, string) { return cond(), "" })
}

// progressing polls state until it says done, failing t when the progress
// it reports has not moved for idle: a bound on liveness (the flow
// stalled) that does not depend on how fast the machine is, however long
// the whole takes.
func progressing(t testing.TB, idle time.Duration, what string, state func() (progress int64, done bool, desc string)) {
	t.Helper()
	last, moved := int64(-1), time.Now()
	for {
		p, done, desc := state()
		if done {
			return
		}
		if p != last {
			last, moved = p, time.Now()
		} else if time.Since(moved) > idle {
			t.Fatalf("no progress for %v waiting for: %s: %s", idle, what, desc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// broker is one broker with per-test names: where messages go (topics, for
// the relay's publisher) and where handlers read them (bindings).
type broker struct {
	name string
	pub  txbox.Publisher
	sub  txbox.Subscriber
	// topic and binding of a named flow ("orders", "shipments").
	topic   func(flow string) string
	binding func(flow string) string
	// deadLetters returns the dead-lettered copies of flow: message id →
	// headers.
	deadLetters func(t testing.TB, flow string) map[string]map[string]string
	// errHeader and delHeader name the dead letter's headers (or fields)
	// carrying the error and the delivery count.
	errHeader, delHeader string
	// dedupes: the broker drops a second publish of a message id (NATS
	// JetStream's duplicate window); the others deliver it again.
	dedupes bool
	// rereads: a consumer that stops with a record unsettled exposes the
	// later records of its partition again, settled or not (Kafka's one
	// offset per partition), so a message can be dead-lettered twice.
	rereads bool
	// resubscribe, where set, returns a subscriber on a connection of its
	// own, closing the one it returned before, as a restarted process has.
	resubscribe func(t testing.TB) txbox.Subscriber
	// dlqPrefix is the NATS bindings' dead-letter prefix.
	dlqPrefix string
	// dead is the bindings' dead letters as txbox dlq sees them; nil
	// where the broker has no dlq.Store.
	dead dlq.Store
}

var flows = []string{"orders", "shipments", "events"}

// natsBroker makes a stream, a durable consumer per flow and a dead-letter
// stream on the NATS at url.
func natsBroker(t testing.TB, nc *nats.Conn, ackWait time.Duration) *broker {
	t.Helper()
	ctx := context.Background()
	prefix := testenv.Subject()
	stream := strconvName(testenv.Name("S"))
	_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "ev.>"}})
	testenv.Must(t, err, "stream")
	dlqStream := stream + "_DLQ"
	dl, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: dlqStream, Subjects: []string{prefix + "dlq.>"}})
	testenv.Must(t, err, "dlq stream")
	js, _ := jetstream.New(nc)
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), stream)
		_ = js.DeleteStream(context.Background(), dlqStream)
	})
	for _, f := range flows {
		_, err := natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: f, FilterSubjects: []string{prefix + "ev." + f}, AckWait: ackWait})
		testenv.Must(t, err, "consumer %s", f)
	}
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
	testenv.Must(t, err, "subscriber")
	dead, err := natsjs.NewDeadLetters(nc, prefix+"dlq.")
	testenv.Must(t, err, "dead letters")
	var subConn *nats.Conn
	return &broker{
		name: "nats", pub: pub, sub: sub, dead: dead,
		resubscribe: func(t testing.TB) txbox.Subscriber {
			if subConn != nil {
				subConn.Close()
			}
			subConn, err = nats.Connect(nc.ConnectedUrl(), nats.MaxReconnects(-1))
			testenv.Must(t, err, "connect")
			t.Cleanup(subConn.Close)
			sub, err := natsjs.NewSubscriber(subConn, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
			testenv.Must(t, err, "subscriber")
			return sub
		},
		errHeader: txbox.HeaderError, delHeader: txbox.HeaderDeliveries, dedupes: true, dlqPrefix: prefix + "dlq.",
		topic:   func(f string) string { return "ev." + f },
		binding: func(f string) string { return natsjs.Binding(stream, f) },
		deadLetters: func(t testing.TB, f string) map[string]map[string]string {
			out := map[string]map[string]string{}
			info, err := dl.Info(ctx)
			testenv.Must(t, err, "dlq info")
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
				m, err := dl.GetMsg(ctx, seq)
				if err != nil {
					continue
				}
				if m.Header.Get(txbox.HeaderBinding) != natsjs.Binding(stream, f) {
					continue
				}
				h := map[string]string{}
				for k := range m.Header {
					h[k] = m.Header.Get(k)
				}
				out[m.Header.Get(txbox.HeaderMessageID)] = h
			}
			return out
		},
	}
}

func strconvName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// rabbitBroker declares a queue per flow; subURL is what the subscriber
// dials (the broker, or a proxy in front of it).
func rabbitBroker(t testing.TB, url, subURL string) *broker {
	t.Helper()
	ctx := context.Background()
	base := testenv.Name("q")
	conn := testenv.RabbitMQConn(t, url)
	for _, f := range flows {
		testenv.Must(t, txboxrabbitmq.DeclareQueue(ctx, conn, txboxrabbitmq.QueueConfig{Name: base + "." + f}), "declare %s", f)
	}
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
		for _, f := range flows {
			q := base + "." + f
			for _, n := range []string{q, q + ".retry", q + ".dlq"} {
				_, _ = ch.QueueDelete(n, false, false, false)
			}
			_ = ch.ExchangeDelete(q+".dlx", false, false)
		}
	})
	pub, err := txboxrabbitmq.NewPublisher(conn, txboxrabbitmq.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	t.Cleanup(func() { _ = pub.Close() })
	sub, err := txboxrabbitmq.NewSubscriber(testenv.RabbitMQConn(t, subURL), txboxrabbitmq.SubscriberConfig{ReconnectMax: 200 * time.Millisecond})
	testenv.Must(t, err, "subscriber")
	dead, err := txboxrabbitmq.NewDeadLetters(conn)
	testenv.Must(t, err, "dead letters")
	return &broker{
		name: "rabbitmq", pub: pub, sub: sub, dead: dead,
		errHeader: txbox.HeaderError, delHeader: txbox.HeaderDeliveries,
		topic:   func(f string) string { return base + "." + f },
		binding: func(f string) string { return base + "." + f },
		deadLetters: func(t testing.TB, f string) map[string]map[string]string {
			// Peek: get every message without ack, then close the channel
			// (they return to the queue).
			conn, err := amqp.Dial(url)
			testenv.Must(t, err, "dial")
			defer conn.Close()
			ch, err := conn.Channel()
			testenv.Must(t, err, "channel")
			out := map[string]map[string]string{}
			for {
				d, ok, err := ch.Get(base+"."+f+".dlq", false)
				testenv.Must(t, err, "get")
				if !ok {
					break
				}
				h := map[string]string{}
				for k, v := range d.Headers {
					h[k] = fmt.Sprint(v)
				}
				out[d.MessageId] = h
			}
			return out
		},
	}
}

// db is one database behind a driver, for the generic tests.
type db[TTx any] struct {
	name string
	drv  txboxdriver.Driver[TTx]
}

func (d db[TTx]) ph(n int) string {
	switch d.drv.Dialect() {
	case txboxdriver.Postgres:
		return "$" + strconv.Itoa(n)
	case txboxdriver.MySQL:
		return "?" // MySQL has no numbered placeholders
	}
	return "?" + strconv.Itoa(n)
}

// text is a string column type that can be a key (MySQL cannot index an
// unsized TEXT).
func (d db[TTx]) text() string {
	if d.drv.Dialect() == txboxdriver.MySQL {
		return "varchar(191)"
	}
	return "text"
}

func (d db[TTx]) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	_, err := d.drv.Pool().Exec(context.Background(), q, args...)
	testenv.Must(t, err, "exec %s", q)
}

// count runs a query returning one integer.
func (d db[TTx]) count(t testing.TB, q string, args ...any) int64 {
	t.Helper()
	rows, err := d.drv.Pool().Query(context.Background(), q, args...)
	testenv.Must(t, err, "query %s", q)
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("query %s: no row: %v", q, rows.Err())
	}
	var n int64
	testenv.Must(t, rows.Scan(&n), "scan")
	return n
}

// migrateAll creates the inbox table and the given outbox tables.
func (d db[TTx]) migrateAll(t testing.TB, outboxes ...string) {
	t.Helper()
	cfgs := []txboxmigrate.Config{{NoOutbox: true, InboxTables: []string{consumer.DefaultInboxTable}}}
	for _, o := range outboxes {
		cfgs = append(cfgs, txboxmigrate.Config{OutboxTable: o})
	}
	for _, c := range cfgs {
		m, err := txboxmigrate.New(d.drv, c)
		testenv.Must(t, err, "txboxmigrate.New")
		_, err = m.Up(context.Background())
		testenv.Must(t, err, "migrate up")
	}
}

func pgxDB(t testing.TB, conns int) db[pgx.Tx] {
	pool, _ := testenv.Postgres(t, conns)
	return db[pgx.Tx]{name: "pgx", drv: txboxpgx.New(pool)}
}

func sqliteDB(t testing.TB) db[*sql.Tx] {
	sdb := testenv.SQLite(t)
	return db[*sql.Tx]{name: "sqlite", drv: txboxsql.New(sdb, txboxdriver.SQLite)}
}

func mysqlDB(t testing.TB) db[*sql.Tx] {
	return db[*sql.Tx]{name: "mysql", drv: txboxsql.New(testenv.MySQL(t), txboxdriver.MySQL)}
}

// dropAcks wraps a Subscriber: the first n Acks on binding are dropped,
// never sent — as if the process died between its commit and its ACK.
type dropAcks struct {
	txbox.Subscriber
	binding string
	left    atomic.Int64
	dropped atomic.Int64
}

func (d *dropAcks) Subscribe(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	s, err := d.Subscriber.Subscribe(ctx, binding, prefetch)
	if err != nil || binding != d.binding {
		return s, err
	}
	return &dropSub{Subscription: s, d: d}, nil
}

type dropSub struct {
	txbox.Subscription
	d *dropAcks
}

func (s *dropSub) Next(ctx context.Context) (txbox.Delivery, error) {
	del, err := s.Subscription.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &dropDelivery{Delivery: del, d: s.d}, nil
}

type dropDelivery struct {
	txbox.Delivery
	d *dropAcks
}

func (dd *dropDelivery) Ack(ctx context.Context) error {
	if dd.d.left.Add(-1) >= 0 {
		dd.d.dropped.Add(1)
		return nil
	}
	return dd.Delivery.Ack(ctx)
}
