package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// BenchmarkConsume measures messages consumed and committed per second
// through an Inbox handler and through an AtLeastOnce handler doing the
// same business write (one INSERT), on each broker, interleaved, from one
// run, and reports their ratio. Run it once:
//
//	CI=true go test ./consumer -run '^$' -bench Consume -benchtime 1x
func BenchmarkConsume(b *testing.B) {
	for _, kind := range []string{"nats", "rabbitmq"} {
		b.Run(kind, func(b *testing.B) {
			const msgs, reps = 5000, 3
			pool, _ := testenv.Postgres(b, 20)
			d := db[pgx.Tx]{name: "pgx", drv: txboxpgx.New(pool)}
			d.migrateAll(b)
			d.exec(b, "CREATE TABLE biz (id text NOT NULL, n integer NOT NULL)")
			var br *broker
			if kind == "nats" {
				br = natsBroker(b, testenv.NATS(b), 30*time.Second)
			} else {
				u := testenv.RabbitMQ(b)
				br = rabbitBroker(b, u, u)
			}
			ctx := context.Background()
			run := func(rep int, g consumer.Guarantee) float64 {
				flow := "orders"
				if g == consumer.AtLeastOnce {
					flow = "events"
				}
				var batch []txbox.Message
				for i := range msgs {
					batch = append(batch, txbox.Message{ID: fmt.Sprintf("%s-%d-%d", flow, rep, i), Topic: br.topic(flow), Payload: []byte(`{"order":1}`)})
					if len(batch) == 500 || i == msgs-1 {
						for _, err := range br.pub.Publish(ctx, batch) {
							testenv.Must(b, err, "publish")
						}
						batch = nil
					}
				}
				c, err := consumer.New(d.drv, consumer.Config{Broker: br.sub, Logger: quiet})
				testenv.Must(b, err, "New")
				h := consumer.HandlerConfig{Name: "bench", Binding: br.binding(flow)}
				if g == consumer.Inbox {
					err = c.HandleInbox(h, func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
						_, err := tx.Exec(ctx, "INSERT INTO biz (id, n) VALUES ($1, 1)", msg.ID)
						return err
					})
				} else {
					err = c.HandleAtLeastOnce(h, func(ctx context.Context, msg consumer.Message) error {
						_, err := pool.Exec(ctx, "INSERT INTO biz (id, n) VALUES ($1, 1)", msg.ID)
						return err
					})
				}
				testenv.Must(b, err, "register")
				start := time.Now()
				testenv.Must(b, c.Start(ctx), "start")
				eventually(b, "all consumed", func() bool { return c.Stats().Handled >= msgs })
				el := time.Since(start)
				testenv.Must(b, c.Stop(ctx), "stop")
				return float64(msgs) / el.Seconds()
			}
			var inboxRates, aloRates []float64
			for rep := range reps {
				inboxRates = append(inboxRates, run(rep, consumer.Inbox))
				aloRates = append(aloRates, run(rep, consumer.AtLeastOnce))
			}
			med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
			in, alo := med(inboxRates), med(aloRates)
			b.ReportMetric(in, "inbox-msg/s")
			b.ReportMetric(alo, "alo-msg/s")
			b.ReportMetric(in/alo, "inbox/alo")
			b.Logf("%s: inbox %v msg/s, at-least-once %v msg/s (per rep), median ratio %.2f", kind, round(inboxRates), round(aloRates), in/alo)
		})
	}
}

func round(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}
