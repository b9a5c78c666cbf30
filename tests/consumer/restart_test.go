package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/natsembed"
	"github.com/txbox/txbox/tests/testenv"
)

// counting registers an inbox handler on flow "orders" that inserts one
// row per message into applied (no unique constraint) and counts its runs.
func counting(t *testing.T, d db[pgx.Tx], b *broker, runs *atomic.Int64, slow time.Duration) *consumer.Consumer[pgx.Tx] {
	t.Helper()
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Logger: quiet})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders")},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			runs.Add(1)
			if slow > 0 {
				time.Sleep(slow)
			}
			_, err := tx.Exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID)
			return err
		}), "register")
	return c
}

func publishAll(t *testing.T, b *broker, ids []string) {
	t.Helper()
	var msgs []txbox.Message
	for _, id := range ids {
		msgs = append(msgs, txbox.Message{ID: id, Topic: b.topic("orders"), Payload: []byte(id)})
	}
	eventually(t, "published", func() bool {
		var left []txbox.Message
		for i, err := range b.pub.Publish(context.Background(), msgs) {
			if err != nil {
				left = append(left, msgs[i])
			}
		}
		msgs = left
		return len(msgs) == 0
	})
}

func ids(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return out
}

func assertExactlyOnce(t *testing.T, d db[pgx.Tx], n int64) {
	t.Helper()
	progressing(t, time.Minute, "every message applied", func() (int64, bool, string) {
		applied := d.count(t, "SELECT count(DISTINCT id) FROM applied")
		return applied, applied == n, fmt.Sprintf("%d of %d applied", applied, n)
	})
	if rows := d.count(t, "SELECT count(*) FROM applied"); rows != n {
		t.Fatalf("%d rows for %d messages: applied twice", rows, n)
	}
}

// A broker restart (embedded NATS, stopped and started on the same port and
// storage) or a cut connection (RabbitMQ behind a proxy) in the middle of a
// run: the consumer reconnects, nothing is lost, nothing applied twice.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		d := pgxDB(t, 10)
		d.migrateAll(t)
		d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
		dir := t.TempDir()
		srv, err := natsembed.Start(natsembed.Config{Dir: dir})
		testenv.Must(t, err, "start nats")
		port := srv.Port()
		t.Cleanup(func() { srv.Shutdown() })
		nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		testenv.Must(t, err, "connect")
		t.Cleanup(nc.Close)
		b := natsBroker(t, nc, 2*time.Second)
		var runs atomic.Int64
		c := counting(t, d, b, &runs, 2*time.Millisecond)
		testenv.Must(t, c.Start(context.Background()), "start")
		t.Cleanup(func() { _ = c.Stop(context.Background()) })

		publishAll(t, b, ids("a", 300))
		eventually(t, "consumer mid-run", func() bool { return runs.Load() >= 50 })
		srv.Shutdown()
		srv, err = natsembed.Start(natsembed.Config{Dir: dir, Port: port})
		testenv.Must(t, err, "restart nats")
		publishAll(t, b, ids("b", 100))
		assertExactlyOnce(t, d, 400)
		t.Logf("stats %+v, handler runs %d", c.Stats(), runs.Load())
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		d := pgxDB(t, 10)
		d.migrateAll(t)
		d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
		u := testenv.RabbitMQ(t)
		proxy := testenv.NewProxy(t, testenv.Target(u))
		b := rabbitBroker(t, u, "amqp://guest:guest@"+proxy.Addr()+"/")
		var runs atomic.Int64
		c := counting(t, d, b, &runs, 2*time.Millisecond)
		testenv.Must(t, c.Start(context.Background()), "start")
		t.Cleanup(func() { _ = c.Stop(context.Background()) })

		publishAll(t, b, ids("a", 300))
		eventually(t, "consumer mid-run", func() bool { return runs.Load() >= 50 })
		proxy.Cut()
		publishAll(t, b, ids("b", 100)) // while the consumer is cut off
		proxy.Resume()
		assertExactlyOnce(t, d, 400)
		t.Logf("stats %+v, handler runs %d", c.Stats(), runs.Load())
	})
}

// Copies of one message delivered at the same time to concurrent workers
// (RabbitMQ does not dedupe publishes): the handler's effect is applied
// once, every copy is ACKed.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	d := pgxDB(t, 20)
	d.migrateAll(t)
	d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
	b := newBroker(t, "rabbitmq")
	var runs atomic.Int64
	c := counting(t, d, b, &runs, 5*time.Millisecond)
	const n, copies = 30, 4
	var all []string
	for _, id := range ids("m", n) {
		for range copies {
			all = append(all, id)
		}
	}
	publishAll(t, b, all) // copies adjacent in the queue: they are handed to workers together
	testenv.Must(t, c.Start(context.Background()), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	eventually(t, "every copy settled", func() bool {
		st := c.Stats()
		return st.Handled+st.Duplicates == n*copies
	})
	assertExactlyOnce(t, d, n)
	if st := c.Stats(); st.Handled != n || st.Duplicates != n*(copies-1) {
		t.Fatalf("stats %+v: want %d handled, %d duplicates", st, n, n*(copies-1))
	}
}

// Stop lets in-flight handlers finish within its deadline, cancels the
// rest (their transactions roll back) and releases them: a new consumer
// applies every message exactly once.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"nats", "rabbitmq"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			d := pgxDB(t, 20)
			d.migrateAll(t)
			d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
			b := newBroker(t, kind)
			var runs atomic.Int64
			block := make(chan struct{})
			c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet})
			testenv.Must(t, err, "New")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders")},
				func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
					if runs.Add(1) > 4 {
						select { // the later ones hang until cancelled
						case <-block:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					_, err := tx.Exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID)
					return err
				}), "register")
			testenv.Must(t, c.Start(context.Background()), "start")
			began := time.Now()
			publishAll(t, b, ids("g", 40))
			t.Logf("published 40 message(s) in %v", time.Since(began))
			stopped := false
			t.Cleanup(func() { // a failure before the Stop below
				if !stopped {
					close(block)
					_ = c.Stop(context.Background())
				}
			})
			// One handler hanging is enough for what follows. Not four:
			// inbox handlers run in batches by default, one transaction
			// after another's messages, so a batch stops at its first
			// hanging message; when the 40 messages arrive at once, two
			// workers can take them all in two batches, and only two
			// handlers ever hang (a CI run waited for four for 60 s).
			testenv.Await(t, "a handler hanging", func() (bool, string) {
				n := runs.Load()
				return n >= 5, fmt.Sprintf("%d handler run(s), stats %+v", n, c.Stats())
			})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			err = c.Stop(ctx)
			cancel()
			stopped = true
			if err == nil {
				t.Fatal("Stop returned nil although handlers were still running at its deadline")
			}
			if st := c.Stats(); st.Released == 0 {
				t.Fatalf("nothing released at Stop: %+v", st)
			}
			close(block)
			var runs2 atomic.Int64
			c2 := counting(t, d, b, &runs2, 0)
			testenv.Must(t, c2.Start(context.Background()), "start again")
			t.Cleanup(func() { _ = c2.Stop(context.Background()) })
			assertExactlyOnce(t, d, 40)
		})
	}
}
