package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

var errNotNext = errors.New("not the key's next version")

// A consumer killed in the middle of a batch (its connection gone, its
// transaction rolled back, nothing settled) strands what it held only for
// its subscription's lease, not for the durable's AckWait: the next
// consumer applies every message, each key's in order, although the
// AckWait (10 minutes) never passes in the test. The handler keeps each
// key's order itself, as the crash harness's does: a version that is not
// its key's next is refused and retried, so without the lease the killed
// batch's first message of key k would hold back every later one of k for
// the whole AckWait (and the test fails: no progress).
func TestKilledBatchStrandsItsKeysOnlyForTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := pgxDB(t, 12)
	d.migrateAll(t)
	d.exec(t, "CREATE TABLE kills (key text NOT NULL, version int NOT NULL)")
	main := testenv.NATS(t)
	br := natsBroker(t, main, 10*time.Minute)
	const versions = 40
	keys := []string{"k", "j", "m"}
	var msgs []txbox.Message
	for v := 1; v <= versions; v++ {
		for _, k := range keys {
			id := fmt.Sprintf("%s/%d", k, v)
			msgs = append(msgs, txbox.Message{ID: id, Topic: br.topic("orders"), Key: k, Payload: []byte(id)})
		}
	}
	for _, err := range br.pub.Publish(ctx, msgs) {
		testenv.Must(t, err, "publish")
	}

	// hold, when set, makes the handler wait on k/1 until its context ends
	// (the consumer was killed), and closes held once it does.
	start := func(hold bool, held chan struct{}) (*consumer.Consumer[pgx.Tx], *nats.Conn) {
		nc, err := nats.Connect(main.ConnectedUrl(), nats.MaxReconnects(-1))
		testenv.Must(t, err, "connect")
		t.Cleanup(nc.Close)
		sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: br.dlqPrefix, Lease: time.Second})
		testenv.Must(t, err, "subscriber")
		c, err := consumer.New(d.drv, consumer.Config{Broker: sub, Concurrency: 2, Logger: quiet,
			BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
		testenv.Must(t, err, "New")
		var once atomic.Bool
		testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "kills", Binding: br.binding("orders")},
			func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
				key, v, _ := strings.Cut(string(msg.Payload), "/")
				version, err := strconv.Atoi(v)
				if err != nil {
					return consumer.Permanent(err)
				}
				if hold && msg.ID == "k/1" && once.CompareAndSwap(false, true) {
					close(held)
					<-ctx.Done()
					return ctx.Err()
				}
				var last int
				if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM kills WHERE key = $1", key).Scan(&last); err != nil {
					return err
				}
				if version > last+1 {
					return fmt.Errorf("%w: %s after %d", errNotNext, msg.ID, last)
				}
				_, err = tx.Exec(ctx, "INSERT INTO kills (key, version) VALUES ($1, $2)", key, version)
				return err
			}), "register")
		testenv.Must(t, c.Start(ctx), "start")
		return c, nc
	}

	held := make(chan struct{})
	a, ncA := start(true, held)
	<-held // a's batch with k/1 is in flight
	ncA.Close()
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	_ = a.Stop(stopped) // its handlers cancelled, its batch rolled back; nothing settles on a closed connection

	b, _ := start(false, nil)
	defer func() { testenv.Must(t, b.Stop(ctx), "stop") }()
	total := int64(versions * len(keys))
	progressing(t, 30*time.Second, "every message applied after the kill", func() (int64, bool, string) {
		n := d.count(t, "SELECT count(*) FROM kills")
		return n, n >= total, fmt.Sprintf("%d of %d applied; k's last version %d (AckWait 10m: k/1 stays stranded without the lease); stats %+v",
			n, total, d.count(t, "SELECT coalesce(max(version), 0) FROM kills WHERE key = 'k'"), b.Stats())
	})
	if n := d.count(t, "SELECT count(DISTINCT (key, version)) FROM kills"); n != total {
		t.Fatalf("%d distinct effects for %d messages", n, total)
	}
	if n := d.count(t, "SELECT count(*) FROM kills"); n != total {
		t.Fatalf("%d effects for %d messages: applied twice", n, total)
	}
}
