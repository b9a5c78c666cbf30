package consumer_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/internal/testenv"
)

// TestKafkaDeadLetterAfterTakeover reproduces kafkaDeadLetterBug on one
// partition: a, bad. The first consumer handles a but its ACK is lost (it
// dies between commit and ACK) and dead-letters bad; it stops. The next
// member of the group resumes at a, the committed offset, and dead-letters
// bad a second time. Skipped unless TXBOX_KNOWN_BUGS=1.
func TestKafkaDeadLetterAfterTakeover(t *testing.T) {
	t.Parallel()
	if os.Getenv("TXBOX_KNOWN_BUGS") != "1" {
		t.Skip("known bug: " + kafkaDeadLetterBug + "; TXBOX_KNOWN_BUGS=1 runs it")
	}
	ctx := context.Background()
	b := kafkaBroker(t, 1)
	publish := func(ids ...string) {
		var msgs []txbox.Message
		for _, id := range ids {
			msgs = append(msgs, txbox.Message{ID: id, Topic: b.topic("orders"), Payload: []byte(id)})
		}
		for _, err := range b.pub.Publish(ctx, msgs) {
			testenv.Must(t, err, "publish")
		}
	}
	var mu sync.Mutex
	var seen []string
	start := func(sub consumer.Subscriber) *consumer.Consumer[pgx.Tx] {
		// Concurrency 1: one partition's records run one after another.
		c, err := consumer.New[pgx.Tx](nil, consumer.Config{Broker: sub, Concurrency: 1, MaxDeliveries: 3, Logger: quiet})
		testenv.Must(t, err, "consumer.New")
		testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "h", Binding: b.binding("orders")},
			func(_ context.Context, m consumer.Message) error {
				mu.Lock()
				seen = append(seen, m.ID)
				mu.Unlock()
				if m.ID == "bad" {
					return consumer.Permanent(errors.New("malformed"))
				}
				return nil
			}), "handle")
		testenv.Must(t, c.Start(ctx), "start")
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		return c
	}
	publish("a", "bad")
	drop := &dropAcks{Subscriber: b.sub, binding: b.binding("orders")}
	drop.left.Store(1)
	c1 := start(drop)
	eventually(t, "a's ACK dropped and bad dead-lettered", func() bool {
		return drop.dropped.Load() == 1 && c1.Stats().DeadLettered == 1
	})
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	testenv.Must(t, c1.Stop(stopCtx), "stop the first consumer")
	cancel()
	publish("z")
	c2 := start(b.sub)
	eventually(t, "z handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1] == "z"
	})
	mu.Lock()
	t.Logf("handler runs: %v", seen)
	mu.Unlock()
	if n := c2.Stats().DeadLettered; n != 0 {
		t.Errorf("the second consumer dead-lettered %d more (bad was dead-lettered already)", n)
	}
}
