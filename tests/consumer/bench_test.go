package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// benchModes are the handler shapes compared side by side: the inbox,
// batched (the default) and unbatched (Batch.Size 1, today's baseline),
// and an at-least-once handler doing the same business INSERT in its own
// autocommit. Each has its own flow (binding).
var benchModes = []struct{ name, flow string }{
	{"batched", "orders"}, {"alo", "events"}, {"unbatched", "shipments"},
}

func benchBroker(b *testing.B, kind string) *broker {
	switch kind {
	case "nats":
		return natsBroker(b, testenv.NATS(b), 30*time.Second)
	case "redis":
		return redisBroker(b, 30*time.Second)
	case "kafka":
		return kafkaBroker(b, 3)
	}
	u := testenv.RabbitMQ(b)
	return rabbitBroker(b, u, u)
}

// benchConsumer registers the mode's handler on br, inserting one row into
// biz per message.
func benchConsumer(b *testing.B, pool *pgxpool.Pool, d db[pgx.Tx], br *broker, mode, flow string) *consumer.Consumer[pgx.Tx] {
	sub := br.sub
	cfg := consumer.Config{Broker: sub, Logger: quiet}
	if mode == "unbatched" {
		cfg.Batch.Size = 1
	}
	c, err := consumer.New(d.drv, cfg)
	testenv.Must(b, err, "New")
	h := consumer.HandlerConfig{Name: "bench", Binding: br.binding(flow)}
	if mode == "alo" {
		err = c.HandleAtLeastOnce(h, func(ctx context.Context, msg consumer.Message) error {
			_, err := pool.Exec(ctx, "INSERT INTO biz (id, n) VALUES ($1, 1)", msg.ID)
			return err
		})
	} else {
		err = c.HandleInbox(h, func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			_, err := tx.Exec(ctx, "INSERT INTO biz (id, n) VALUES ($1, 1)", msg.ID)
			return err
		})
	}
	testenv.Must(b, err, "register")
	return c
}

func benchSetup(b *testing.B, kind string) (*pgxpool.Pool, db[pgx.Tx], *broker) {
	pool, _ := testenv.Postgres(b, 20)
	d := db[pgx.Tx]{name: "pgx", drv: txboxpgx.New(pool)}
	d.migrateAll(b)
	d.exec(b, "CREATE TABLE biz (id text NOT NULL, n integer NOT NULL)")
	return pool, d, benchBroker(b, kind)
}

// BenchmarkConsume measures messages consumed and committed per second
// (PostgreSQL, concurrency 8, 5 repetitions) through a batched inbox handler, an
// at-least-once handler doing the same business write (one INSERT), and an
// unbatched inbox handler, on each broker, interleaved (each repetition
// runs the three modes one after another), from one run, and reports the
// medians, their ratios and the medians of each repetition's ratios
// (paired). Run it once:
//
//	CI=true go test ./consumer -run '^$' -bench 'Consume$' -benchtime 1x
func BenchmarkConsume(b *testing.B) {
	for _, kind := range e2eBrokers {
		b.Run(kind, func(b *testing.B) {
			const msgs, reps = 3000, 5
			pool, d, br := benchSetup(b, kind)
			ctx := context.Background()
			run := func(rep int, mode, flow string) float64 {
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
				c := benchConsumer(b, pool, d, br, mode, flow)
				start := time.Now()
				testenv.Must(b, c.Start(ctx), "start")
				eventually(b, "all consumed", func() bool { return c.Stats().Handled >= msgs })
				el := time.Since(start)
				testenv.Must(b, c.Stop(ctx), "stop")
				if st := c.Stats(); mode == "batched" && rep == 0 {
					b.Logf("%s batched: %d messages in %d batch transactions", kind, st.Handled, st.Batches)
				}
				return float64(msgs) / el.Seconds()
			}
			rates := map[string][]float64{}
			for rep := range reps {
				for _, m := range benchModes {
					rates[m.name] = append(rates[m.name], run(rep, m.name, m.flow))
				}
			}
			med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
			bat, alo, unb := med(rates["batched"]), med(rates["alo"]), med(rates["unbatched"])
			// Paired: the median of each repetition's own ratio, which
			// cancels the machine's drift between repetitions.
			var pAlo, pUnb []float64
			for i := range reps {
				pAlo = append(pAlo, rates["batched"][i]/rates["alo"][i])
				pUnb = append(pUnb, rates["batched"][i]/rates["unbatched"][i])
			}
			b.ReportMetric(bat, "batched-msg/s")
			b.ReportMetric(alo, "alo-msg/s")
			b.ReportMetric(unb, "unbatched-msg/s")
			b.ReportMetric(bat/alo, "batched/alo")
			b.ReportMetric(bat/unb, "batched/unbatched")
			b.ReportMetric(med(pAlo), "paired-batched/alo")
			b.ReportMetric(med(pUnb), "paired-batched/unbatched")
			b.Logf("%s: batched %v, at-least-once %v, unbatched %v msg/s (per rep); medians %.0f / %.0f / %.0f; batched/alo %.2f (paired %.2f), batched/unbatched %.2f (paired %.2f)",
				kind, round(rates["batched"]), round(rates["alo"]), round(rates["unbatched"]), bat, alo, unb, bat/alo, med(pAlo), bat/unb, med(pUnb))
		})
	}
}

// BenchmarkConsumeLatency offers messages at a steady 100 and 1,000 msg/s
// for a few seconds and reports the median publish-to-ACK time per message
// (the ACK follows the commit) of each mode, interleaved, from one run:
//
//	CI=true go test ./consumer -run '^$' -bench ConsumeLatency -benchtime 1x
func BenchmarkConsumeLatency(b *testing.B) {
	for _, kind := range e2eBrokers {
		b.Run(kind, func(b *testing.B) {
			pool, d, br := benchSetup(b, kind)
			ctx := context.Background()
			var lines []string
			for _, rate := range []int{100, 1000} {
				for _, m := range benchModes {
					timed := &ackTimer{Subscriber: br.sub}
					br2 := *br
					br2.sub = timed
					c := benchConsumer(b, pool, d, &br2, m.name, m.flow)
					testenv.Must(b, c.Start(ctx), "start")
					const dur, tick = 3 * time.Second, 10 * time.Millisecond
					perTick := rate * int(tick) / int(time.Second)
					n := 0
					for t0 := time.Now(); time.Since(t0) < dur; {
						next := time.Now().Add(tick)
						var batch []txbox.Message
						now := strconv.FormatInt(time.Now().UnixNano(), 10)
						for range perTick {
							batch = append(batch, txbox.Message{ID: fmt.Sprintf("lat-%s-%d-%d", m.name, rate, n), Topic: br.topic(m.flow), Payload: []byte(now)})
							n++
						}
						for _, err := range br.pub.Publish(ctx, batch) {
							testenv.Must(b, err, "publish")
						}
						time.Sleep(time.Until(next))
					}
					eventually(b, "all consumed", func() bool { return c.Stats().Handled >= int64(n) })
					testenv.Must(b, c.Stop(ctx), "stop")
					p50 := timed.p50()
					b.ReportMetric(float64(p50.Microseconds())/1000, fmt.Sprintf("%s-%d/s-p50-ms", m.name, rate))
					lines = append(lines, fmt.Sprintf("%s %d msg/s: p50 %.2f ms (%d msgs)", m.name, rate, float64(p50.Microseconds())/1000, n))
				}
			}
			b.Logf("%s: %s", kind, strings.Join(lines, "; "))
		})
	}
}

// ackTimer wraps a Subscriber and records, for each ACK, the time since
// the nanosecond timestamp in the message's payload.
type ackTimer struct {
	txbox.Subscriber
	mu  sync.Mutex
	lat []time.Duration
}

func (a *ackTimer) Subscribe(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	s, err := a.Subscriber.Subscribe(ctx, binding, prefetch)
	if err != nil {
		return nil, err
	}
	return &ackTimerSub{Subscription: s, a: a}, nil
}

func (a *ackTimer) p50() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.lat) == 0 {
		return 0
	}
	s := slices.Clone(a.lat)
	slices.Sort(s)
	return s[len(s)/2]
}

type ackTimerSub struct {
	txbox.Subscription
	a *ackTimer
}

func (s *ackTimerSub) Next(ctx context.Context) (txbox.Delivery, error) {
	d, err := s.Subscription.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &ackTimerDelivery{Delivery: d, a: s.a}, nil
}

type ackTimerDelivery struct {
	txbox.Delivery
	a *ackTimer
}

func (d *ackTimerDelivery) Ack(ctx context.Context) error {
	err := d.Delivery.Ack(ctx)
	if ns, perr := strconv.ParseInt(string(d.Message().Payload), 10, 64); perr == nil && err == nil {
		lat := time.Since(time.Unix(0, ns))
		d.a.mu.Lock()
		d.a.lat = append(d.a.lat, lat)
		d.a.mu.Unlock()
	}
	return err
}

func round(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}
