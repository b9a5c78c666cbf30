package consumer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
)

type orderPlaced struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

// HandleInboxJSON decodes the payload into T for the handler, and
// dead-letters a payload that does not decode at once, with the decoding
// error, leaving no receipt and no effect; HandleAtLeastOnceJSON likewise.
// On JetStream and RabbitMQ with PostgreSQL.
func TestHandleJSON(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"nats", "rabbitmq"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := newBroker(t, kind)
			d := pgxDB(t, 4)
			d.migrateAll(t)
			orders := testenv.Name("orders")
			d.exec(t, "CREATE TABLE "+orders+" (id text PRIMARY KEY, amount int NOT NULL)")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet})
			testenv.Must(t, err, "New")
			var inboxRuns, aloRuns atomic.Int64
			testenv.Must(t, consumer.HandleInboxJSON(c, consumer.HandlerConfig{Name: "orders", Binding: b.binding("orders")},
				func(ctx context.Context, tx pgx.Tx, _ consumer.Message, o orderPlaced) error {
					inboxRuns.Add(1)
					_, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id, amount) VALUES ($1, $2)", o.Order, o.Amount)
					return err
				}), "register")
			testenv.Must(t, consumer.HandleAtLeastOnceJSON(c, consumer.HandlerConfig{Name: "audit", Binding: b.binding("events")},
				func(_ context.Context, _ consumer.Message, o orderPlaced) error {
					if o.Order == "o-2" {
						aloRuns.Add(1)
					}
					return nil
				}), "register")
			testenv.Must(t, c.Start(ctx), "start")
			defer func() { _ = c.Stop(context.Background()) }()
			good, bad, good2, bad2 := testenv.Name("good"), testenv.Name("bad"), testenv.Name("good2"), testenv.Name("bad2")
			if errs := b.pub.Publish(ctx, []txbox.Message{
				{ID: good, Topic: b.topic("orders"), Payload: []byte(`{"order":"o-1","amount":1999}`)},
				{ID: bad, Topic: b.topic("orders"), Payload: []byte(`{"order":"o-9","amount":"lots"}`)},
				{ID: good2, Topic: b.topic("events"), Payload: []byte(`{"order":"o-2","amount":5}`)},
				{ID: bad2, Topic: b.topic("events"), Payload: []byte(`not json`)},
			}); errs != nil {
				t.Fatalf("publish: %v", errs)
			}
			eventually(t, "all settled", func() bool { s := c.Stats(); return s.Handled == 2 && s.DeadLettered == 2 })
			if n := d.count(t, "SELECT count(*) FROM "+orders+" WHERE id = 'o-1' AND amount = 1999"); n != 1 {
				t.Errorf("order o-1 rows %d, want 1", n)
			}
			if n := d.count(t, "SELECT count(*) FROM "+orders); n != 1 {
				t.Errorf("%d order rows, want 1 (the bad payload has no effect)", n)
			}
			if n := d.count(t, "SELECT count(*) FROM txbox_inbox WHERE message_id = $1", bad); n != 0 {
				t.Errorf("the undecodable message left %d receipts, want 0", n)
			}
			if inboxRuns.Load() != 1 || aloRuns.Load() != 1 {
				t.Errorf("handlers ran %d and %d times, want 1 and 1", inboxRuns.Load(), aloRuns.Load())
			}
			if s := c.Stats(); s.Retried != 0 {
				t.Errorf("stats %+v: an undecodable payload was retried", s)
			}
			for flow, id := range map[string]string{"orders": bad, "events": bad2} {
				e := b.deadLetters(t, flow)[id][b.errHeader]
				if !strings.Contains(e, "as JSON into consumer_test.orderPlaced") {
					t.Errorf("dead letter of %s: error %q, want the decoding error", id, e)
				}
			}
		})
	}
}
