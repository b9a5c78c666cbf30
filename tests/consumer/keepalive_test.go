package consumer_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// A handler that runs 3.5 times the broker's ack deadline (JetStream
// AckWait, Redis Streams' claim idle time: 1 s here) is not redelivered
// under it while the consumer keeps the delivery alive (InProgress; XCLAIM
// JUSTID to itself); with the keep-alive off (NoKeepAlive, the control
// that shows the test can fail) a second copy runs while the first still
// does.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	for _, kind := range []string{"nats", "redis"} {
		for _, keep := range []bool{true, false} {
			name := kind + "/keepalive"
			if !keep {
				name = kind + "/off"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var b *broker
				var js jetstream.JetStream
				if kind == "nats" {
					nc := testenv.NATS(t)
					js, _ = jetstream.New(nc)
					b = natsBroker(t, nc, ackWait)
				} else {
					b = redisBroker(t, ackWait)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				c, err := consumer.New[pgx.Tx](nil, consumer.Config{Broker: b.sub, Logger: quiet, Concurrency: 2, NoKeepAlive: !keep})
				testenv.Must(t, err, "New")
				var mu sync.Mutex
				var runs []int // Deliveries of each run
				testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "slow", Binding: b.binding("orders")}, func(_ context.Context, m consumer.Message) error {
					mu.Lock()
					runs = append(runs, m.Deliveries)
					first := len(runs) == 1
					mu.Unlock()
					if first {
						time.Sleep(7 * ackWait / 2) // the long run (not an assertion)
					}
					return nil
				}), "register")
				testenv.Must(t, c.Start(ctx), "start")
				defer func() { _ = c.Stop(context.Background()) }()
				if errs := b.pub.Publish(ctx, []txbox.Message{{ID: testenv.Name("long"), Topic: b.topic("orders"), Payload: []byte("x")}}); errs != nil {
					t.Fatalf("publish: %v", errs)
				}
				if !keep {
					eventually(t, "a second copy runs while the first does", func() bool {
						mu.Lock()
						defer mu.Unlock()
						return len(runs) >= 2 && c.Stats().Handled >= 2
					})
					mu.Lock()
					defer mu.Unlock()
					if runs[1] < 2 {
						t.Errorf("runs %v: the second run's Deliveries should be >= 2", runs)
					}
					return
				}
				eventually(t, "the long run acked", func() bool { return c.Stats().Handled >= 1 })
				mu.Lock()
				if len(runs) != 1 || runs[0] != 1 {
					t.Errorf("runs (their Deliveries) %v, want [1]: the message was redelivered under its handler", runs)
				}
				mu.Unlock()
				if s := c.Stats(); s.Handled != 1 || s.Retried != 0 || s.AckFailed != 0 {
					t.Errorf("stats %+v, want one handled message", s)
				}
				if js != nil {
					stream, durable, _ := natsjs.ParseBinding(b.binding("orders"))
					cons, err := js.Consumer(ctx, stream, durable)
					testenv.Must(t, err, "consumer")
					// Handled counts the run before its ack is sent: wait for
					// the server to have the ack, then ask what it redelivered.
					var info *jetstream.ConsumerInfo
					eventually(t, "the server has the ack", func() bool {
						info, err = cons.Info(ctx)
						testenv.Must(t, err, "consumer info")
						return info.NumAckPending == 0
					})
					if info.NumRedelivered != 0 {
						t.Errorf("server: %d redelivered, want 0", info.NumRedelivered)
					}
				}
			})
		}
	}
}

// The AckWait of the durables natsjs creates is short by default
// (natsjs.DefaultAckWait), and SubscriberConfig.AckWait sets it on the
// durables a Subscriber opens.
func TestSubscriberAckWait(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t)
	b := natsBroker(t, nc, 0)
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	stream, durable, _ := natsjs.ParseBinding(b.binding("orders"))
	cons, err := js.Consumer(ctx, stream, durable)
	testenv.Must(t, err, "consumer")
	if got := cons.CachedInfo().Config.AckWait; got != natsjs.DefaultAckWait {
		t.Errorf("EnsureConsumer's AckWait %v, want natsjs.DefaultAckWait %v", got, natsjs.DefaultAckWait)
	}
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{AckWait: 3 * time.Second})
	testenv.Must(t, err, "subscriber")
	s, err := sub.Subscribe(ctx, b.binding("orders"), 1)
	testenv.Must(t, err, "subscribe")
	defer func() { _ = s.Close(ctx) }()
	info, err := cons.Info(ctx)
	testenv.Must(t, err, "info")
	if info.Config.AckWait != 3*time.Second {
		t.Errorf("AckWait after Subscribe %v, want 3s", info.Config.AckWait)
	}
}

// Startup compares the inbox retention with the broker's horizon: a
// JetStream stream's MaxAge, a Kafka topic's retention.ms. A retention
// that does not exceed it is a startup problem; an unbounded or unknown
// horizon (a stream without MaxAge, Redis Streams) is logged once.
func TestRetentionHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		nc := testenv.NATS(t)
		d := pgxDB(t, 4)
		d.migrateAll(t)
		prefix := testenv.Subject()
		stream := strconvName(testenv.Name("H"))
		js, _ := jetstream.New(nc)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
		_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "ev.>", prefix + "dlq.>"}, MaxAge: time.Hour})
		testenv.Must(t, err, "stream")
		_, err = natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: "d", FilterSubjects: []string{prefix + "ev.>"}})
		testenv.Must(t, err, "consumer")
		sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
		testenv.Must(t, err, "subscriber")
		binding := natsjs.Binding(stream, "d")
		for _, tc := range []struct {
			retention time.Duration
			problem   string
		}{
			{30 * time.Minute, `binding "` + binding + `": the inbox retention (30m0s) does not exceed the broker's redelivery horizon (1h0m0s: stream ` + stream + `: MaxAge 1h0m0s`},
			{time.Hour, "the inbox retention (1h0m0s) does not exceed"},
			{2 * time.Hour, ""},
		} {
			c, err := consumer.New(d.drv, consumer.Config{Broker: sub, Logger: quiet, Inbox: inboxRetention(tc.retention)})
			testenv.Must(t, err, "New")
			testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "h", Binding: binding}, noopTx), "register")
			if tc.problem == "" {
				testenv.Must(t, c.Validate(ctx), "validate with retention %v", tc.retention)
				continue
			}
			expect(t, startupProblems(t, c), tc.problem)
		}
		// A stream without MaxAge: logged once, not an error.
		b := natsBroker(t, nc, 0)
		var buf bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
		c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: log})
		testenv.Must(t, err, "New")
		testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "h", Binding: b.binding("orders")}, noopTx), "register")
		testenv.Must(t, c.Validate(ctx), "validate")
		testenv.Must(t, c.Validate(ctx), "validate again")
		mu.Lock()
		defer mu.Unlock()
		if n := strings.Count(buf.String(), "redelivery horizon is unknown or unbounded"); n != 1 {
			t.Errorf("unknown horizon logged %d times, want once:\n%s", n, buf.String())
		}
		if !strings.Contains(buf.String(), "has no MaxAge") {
			t.Errorf("log does not say why:\n%s", buf.String())
		}
	})
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		b := kafkaBroker(t, 1)
		d := pgxDB(t, 4)
		d.migrateAll(t)
		hz, err := b.sub.(txbox.HorizonReporter).Horizon(ctx, b.binding("orders"))
		testenv.Must(t, err, "horizon")
		if hz.Age <= 0 {
			t.Fatalf("horizon %+v: want the topic's retention.ms", hz)
		}
		c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet, Inbox: inboxRetention(hz.Age)})
		testenv.Must(t, err, "New")
		testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "h", Binding: b.binding("orders")}, noopTx), "register")
		expect(t, startupProblems(t, c), "does not exceed the broker's redelivery horizon ("+hz.Age.String()+": topic ")
		c, err = consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet, Inbox: inboxRetention(hz.Age + time.Hour)})
		testenv.Must(t, err, "New")
		testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "h", Binding: b.binding("orders")}, noopTx), "register")
		testenv.Must(t, c.Validate(ctx), "validate with a longer retention")
	})
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func inboxRetention(d time.Duration) inbox.Config { return inbox.Config{Retention: d} }
