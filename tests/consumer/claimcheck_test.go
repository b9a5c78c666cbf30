package consumer_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
)

// TestClaimCheck, on each database with NATS JetStream (1 MiB max
// payload): Add of a 2 MiB payload stores it in the claim check table in
// the caller's transaction, the relay publishes a message with an empty
// payload and the reference, and the inbox handler sees the whole 2 MiB
// payload, once; a payload under the threshold travels inline; a message
// whose reference the store does not hold is dead-lettered at once with
// the reason while the others flow; Sweep deletes a payload once its
// message was delivered (released) for longer than the retention.
func TestClaimCheck(t *testing.T) {
	t.Parallel()
	for _, dbName := range e2eDatabases {
		t.Run(dbName, func(t *testing.T) {
			t.Parallel()
			switch dbName {
			case "pgx":
				claimCheck(t, pgxDB(t, 10), newBroker(t, "nats"))
			case "sqlite":
				claimCheck(t, sqliteDB(t), newBroker(t, "nats"))
			case "mysql":
				claimCheck(t, mysqlDB(t), newBroker(t, "nats"))
			}
		})
	}
}

func claimCheck[TTx any](t *testing.T, d db[TTx], b *broker) {
	ctx := context.Background()
	d.migrateAll(t, "cc_outbox")
	m, err := txboxmigrate.New(d.drv, txboxmigrate.Config{NoOutbox: true, ClaimCheckTables: []string{claimcheck.DefaultTable}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up claim check")
	store, err := claimcheck.New(d.drv, claimcheck.Config{OutboxTables: []string{"cc_outbox"}})
	testenv.Must(t, err, "claimcheck.New")

	// A consumer whose claim check table is missing does not start.
	missing, err := claimcheck.New(d.drv, claimcheck.Config{Table: "no_such_claims"})
	testenv.Must(t, err, "claimcheck.New")
	c0, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, ClaimCheck: missing, Logger: quiet})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c0.HandleAtLeastOnce(consumer.HandlerConfig{Name: "cc0", Binding: b.binding("orders")},
		func(context.Context, consumer.Message) error { return nil }), "register")
	var se *consumer.StartupError
	if err := c0.Validate(ctx); !errors.As(err, &se) || !strings.Contains(err.Error(), "no_such_claims") {
		t.Fatalf("a missing claim check table: %v, want a StartupError naming it", err)
	}

	if _, err := txbox.New(d.drv, txbox.Config{Table: "cc_outbox", ClaimCheck: store, ClaimCheckThreshold: txbox.DefaultMaxMessageBytes}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("a threshold at MaxMessageBytes: %v, want ErrInvalidConfig", err)
	}
	ob, err := txbox.New(d.drv, txbox.Config{Table: "cc_outbox", ClaimCheck: store})
	testenv.Must(t, err, "outbox")
	r, err := relay.New(d.drv, b.pub, relay.Config{Table: "cc_outbox", PollInterval: 20 * time.Millisecond, DisableNotify: true, Logger: quiet})
	testenv.Must(t, err, "relay")
	testenv.Must(t, r.Start(ctx), "start relay")
	t.Cleanup(func() { _ = r.Stop(context.Background()) })

	var mu sync.Mutex
	runs := map[string]int{}
	payloads := map[string][]byte{}
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, ClaimCheck: store, MaxDeliveries: 3,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Logger: quiet})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "cc", Binding: b.binding("orders")},
		func(ctx context.Context, tx TTx, msg consumer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			for k := range msg.Headers {
				if strings.EqualFold(k, txbox.HeaderClaimCheck) {
					return errors.New("the handler sees the claim check header")
				}
			}
			runs[msg.ID]++
			payloads[msg.ID] = msg.Payload
			return nil
		}), "register")
	testenv.Must(t, c.Start(ctx), "start consumer")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	big := make([]byte, 2<<20)
	_, _ = rand.Read(big)
	// A rolled-back Add stores nothing.
	tx, dtx, err := d.drv.BeginTx(ctx)
	testenv.Must(t, err, "begin")
	testenv.Must(t, testenv.Err(ob.Add(ctx, tx, txbox.Message{ID: "rolled-back", Topic: b.topic("orders"), Payload: big})), "add")
	testenv.Must(t, dtx.Rollback(ctx), "rollback")
	tx, dtx, err = d.drv.BeginTx(ctx)
	testenv.Must(t, err, "begin")
	testenv.Must(t, testenv.Err(ob.Add(ctx, tx,
		txbox.Message{ID: "big", Topic: b.topic("orders"), Payload: big},
		txbox.Message{ID: "small", Topic: b.topic("orders"), Payload: []byte("small")})), "add")
	testenv.Must(t, dtx.Commit(ctx), "commit")
	if n := d.count(t, "SELECT count(*) FROM "+claimcheck.DefaultTable); n != 1 {
		t.Fatalf("claim check table holds %d payloads, want 1 (the committed one)", n)
	}
	if n := d.count(t, "SELECT count(*) FROM cc_outbox WHERE message_id = "+d.ph(1)+" AND length(payload) = 0", "big"); n != 1 {
		t.Fatalf("the big message's row has a payload")
	}
	if n := d.count(t, "SELECT count(*) FROM cc_outbox WHERE message_id = "+d.ph(1)+" AND length(payload) = 5", "small"); n != 1 {
		t.Fatalf("the small message's payload is not inline")
	}
	// A reference the store does not hold, straight to the broker.
	for _, err := range b.pub.Publish(ctx, []txbox.Message{{ID: "forged", Topic: b.topic("orders"),
		Headers: map[string]string{txbox.HeaderClaimCheck: "no-such-ref"}}}) {
		testenv.Must(t, err, "publish forged")
	}

	progressing(t, 30*time.Second, "both messages handled and the forged one dead-lettered", func() (int64, bool, string) {
		mu.Lock()
		defer mu.Unlock()
		s := c.Stats()
		dead := len(b.deadLetters(t, "orders"))
		return s.Handled + s.Retried + s.DeadLettered, runs["big"] == 1 && runs["small"] == 1 && dead == 1,
			fmt.Sprintf("runs %v, dead letters %d, stats %+v", runs, dead, s)
	})
	mu.Lock()
	if !bytes.Equal(payloads["big"], big) || string(payloads["small"]) != "small" || runs["forged"] != 0 || runs["rolled-back"] != 0 {
		t.Fatalf("handler saw big %d bytes (equal %v), small %q, runs %v", len(payloads["big"]), bytes.Equal(payloads["big"], big), payloads["small"], runs)
	}
	mu.Unlock()
	dl := b.deadLetters(t, "orders")["forged"]
	if e := dl[b.errHeader]; !strings.Contains(e, "no-such-ref") || !strings.Contains(e, "not found") {
		t.Fatalf("dead letter's error = %q, want the reference and why", e)
	}
	if got := c.Stats().DeadLettered; got != 1 {
		t.Fatalf("DeadLettered = %d, want 1", got)
	}

	// Retention: the first sweep releases the delivered message's payload
	// (nothing was released an hour ago); a later one deletes it once a
	// microsecond has passed.
	n, err := store.Sweep(ctx, time.Hour)
	testenv.Must(t, err, "sweep")
	if n != 0 {
		t.Fatalf("Sweep(1h) deleted %d", n)
	}
	progressing(t, 30*time.Second, "Sweep(1µs) deletes the payload", func() (int64, bool, string) {
		n, err := store.Sweep(ctx, time.Microsecond)
		testenv.Must(t, err, "sweep")
		return 0, n == 1, fmt.Sprintf("deleted %d", n)
	})
	if _, err := store.Get(ctx, "no-such-ref"); !errors.Is(err, txbox.ErrClaimNotFound) {
		t.Fatalf("Get of a missing ref: %v, want ErrClaimNotFound", err)
	}
}
