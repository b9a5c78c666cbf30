package metrics_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// Every consumer and inbox metric moves: deliveries received and their
// delivery counts, results (fresh, duplicate, failed, dead-lettered), the
// handler's duration, the deliveries in flight, the inbox's receipts by
// state and its sweeps. The duplicate is real: JetStream's duplicate window
// (here 100ms) has passed when the same Nats-Msg-Id is published again, so
// the stream delivers it and the inbox catches it.
func TestConsumerMetricsMove(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, _ := testenv.Postgres(t, 8)
	drv := txboxpgx.New(pool)
	mg, err := txboxmigrate.New(drv, txboxmigrate.Config{NoOutbox: true, InboxTables: []string{consumer.DefaultInboxTable}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = mg.Up(ctx)
	testenv.Must(t, err, "migrate up")

	srv := testenv.EmbeddedNATS(t)
	nc, err := srv.Connect()
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	prefix := testenv.Subject()
	stream := testenv.Name("S")
	_, err = natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "ev.>"}, Duplicates: 100 * time.Millisecond})
	testenv.Must(t, err, "stream")
	_, err = natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream + "_DLQ", Subjects: []string{prefix + "dlq.>"}})
	testenv.Must(t, err, "dlq stream")
	_, err = natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: "h"})
	testenv.Must(t, err, "durable")
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
	testenv.Must(t, err, "subscriber")

	m, reg := metricsFor(t)
	c, err := consumer.New[pgx.Tx](drv, consumer.Config{Broker: sub, Observer: m.Consumer(), BackoffBase: 10 * time.Millisecond,
		Inbox: inbox.Config{Hook: m.InboxHook(nil)}})
	testenv.Must(t, err, "consumer.New")
	const name = "orders"
	var failedOnce atomic.Bool
	slow := make(chan struct{})
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: name, Binding: natsjs.Binding(stream, "h")},
		func(ctx context.Context, _ pgx.Tx, msg consumer.Message) error {
			switch string(msg.Payload) {
			case "fail-once":
				if !failedOnce.Swap(true) {
					return errors.New("first delivery fails")
				}
			case "poison":
				return consumer.Permanent(errors.New("cannot succeed"))
			case "slow":
				select {
				case <-slow:
				case <-ctx.Done():
				}
			}
			return nil
		}), "register")
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	publish := func(id, payload string) {
		_, err := js.Publish(ctx, prefix+"ev.x", []byte(payload), jetstream.WithMsgID(id))
		testenv.Must(t, err, "publish %s", id)
	}
	v := func(name string, labels ...string) float64 { return value(t, reg, name, labels...) }
	h := []string{"handler", name}
	result := func(r string) float64 { return v("txbox_consumer_handled_total", "handler", name, "result", r) }

	publish("slow-1", "slow")
	eventually(t, "one delivery in flight", func() bool { return v("txbox_consumer_in_flight", h...) == 1 })
	close(slow)
	publish("ok-1", "ok")
	publish("dup-1", "ok")
	publish("fail-1", "fail-once")
	publish("poison-1", "poison")
	eventually(t, "the first deliveries handled", func() bool {
		return result("fresh") == 4 && result("failed") == 1 && result("dead_lettered") == 1
	})
	time.Sleep(300 * time.Millisecond) // past the stream's duplicate window
	publish("dup-1", "ok")
	eventually(t, "the inbox duplicate", func() bool { return result("duplicate") == 1 })

	for _, c := range []struct {
		name string
		want float64
	}{
		{"txbox_consumer_received_total", 7},
		{"txbox_consumer_handler_duration_seconds", 7},
		{"txbox_consumer_deliveries", 7},
		{"txbox_consumer_in_flight", 0},
	} {
		if got := v(c.name, h...); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if sum := histogramSum(t, reg, "txbox_consumer_deliveries"); sum != 8 {
		t.Errorf("deliveries sum %v, want 8 (the failed message's second delivery counts 2)", sum)
	}

	// The inbox's receipts, sampled, and a sweep that deletes them.
	ib, err := inbox.New(drv, inbox.Config{Table: consumer.DefaultInboxTable, Hook: m.InboxHook(nil), Retention: time.Millisecond})
	testenv.Must(t, err, "inbox.New")
	m.SampleInbox(ctx, ib)
	if got := v("txbox_inbox_receipts", "source", name, "state", "processed"); got != 4 {
		t.Errorf("processed receipts %v, want 4", got)
	}
	time.Sleep(10 * time.Millisecond)
	n, err := ib.Sweep(ctx)
	testenv.Must(t, err, "sweep")
	m.SampleInbox(ctx, ib)
	table := []string{"table", consumer.DefaultInboxTable}
	if got := v("txbox_inbox_sweeps_total", append(table, "result", "ok")...); got != 1 {
		t.Errorf("sweeps %v, want 1", got)
	}
	if got := v("txbox_inbox_swept_total", table...); got != float64(n) || n != 4 {
		t.Errorf("swept %v (Sweep said %d), want 4", got, n)
	}
	if got := v("txbox_inbox_receipts", "source", name, "state", "processed"); got != -1 {
		t.Errorf("processed receipts %v after the sweep, want no series", got)
	}
}
