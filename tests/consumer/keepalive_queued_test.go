package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
)

// Deliveries the JetStream subscription pulled ahead of the workers (the
// prefetch) are kept alive too: with one worker whose every run takes most
// of the AckWait, the messages queued behind it wait several AckWaits, and
// none is redelivered meanwhile (before, the last three of six ran twice).
// Redis Streams' buffered entries: redisstream.TestBufferedEntriesAreKeptAlive
// (there another consumer of the group would take them).
func TestKeepAliveQueued(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	for _, kind := range []string{"nats"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := natsBroker(t, testenv.NATS(t), ackWait)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := consumer.New[pgx.Tx](nil, consumer.Config{Broker: b.sub, Logger: quiet, Concurrency: 1})
			testenv.Must(t, err, "New")
			var mu sync.Mutex
			runs := map[string][]int{} // message id → Deliveries of each run
			testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "slow", Binding: b.binding("orders")}, func(_ context.Context, m consumer.Message) error {
				mu.Lock()
				runs[m.ID] = append(runs[m.ID], m.Deliveries)
				mu.Unlock()
				time.Sleep(7 * ackWait / 10) // each run takes most of the deadline (not an assertion)
				return nil
			}), "register")
			testenv.Must(t, c.Start(ctx), "start")
			defer func() { _ = c.Stop(context.Background()) }()
			const n = 6
			var msgs []txbox.Message
			for i := range n {
				msgs = append(msgs, txbox.Message{ID: testenv.Name(fmt.Sprint("q", i)), Topic: b.topic("orders"), Payload: []byte("x")})
			}
			if errs := b.pub.Publish(ctx, msgs); errs != nil {
				t.Fatalf("publish: %v", errs)
			}
			eventually(t, "every message handled", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(runs) == n
			})
			time.Sleep(2 * ackWait) // room for a late redelivery to show (not an assertion)
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if r := runs[m.ID]; len(r) != 1 || r[0] != 1 {
					t.Errorf("message %s: runs (their Deliveries) %v, want [1]: redelivered while queued", m.ID, r)
				}
			}
		})
	}
}
