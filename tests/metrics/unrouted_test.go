package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// txbox_consumer_unrouted_total counts, by binding and action, the
// deliveries no route claimed: dead-lettered on one binding, acked on
// another.
func TestConsumerUnroutedMetric(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	stream := testenv.Name("U")
	js, _ := jetstream.New(nc)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "ev.>", prefix + "dlq.>"}})
	testenv.Must(t, err, "stream")
	for _, d := range []string{"dl", "ack"} {
		_, err = natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: d, FilterSubjects: []string{prefix + "ev." + d}})
		testenv.Must(t, err, "durable %s", d)
	}
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
	testenv.Must(t, err, "subscriber")
	m, reg := metricsFor(t)
	c, err := consumer.New[pgx.Tx](nil, consumer.Config{Broker: sub, Observer: m.Consumer(), Unrouted: consumer.UnroutedDeadLetter})
	testenv.Must(t, err, "consumer.New")
	dl, ack := natsjs.Binding(stream, "dl"), natsjs.Binding(stream, "ack")
	testenv.Must(t, c.Bind(consumer.BindingConfig{Binding: ack, Unrouted: consumer.UnroutedAck}), "bind")
	for _, b := range []string{dl, ack} {
		testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: b, Binding: b, Route: consumer.Route{Version: "1"}},
			func(context.Context, consumer.Message) error { return nil }), "register")
	}
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	publish := func(subject, id, version string) {
		msg := nats.NewMsg(prefix + subject)
		msg.Header.Set(jetstream.MsgIDHeader, id)
		msg.Header.Set(consumer.DefaultVersionHeader, version)
		_, err := js.PublishMsg(ctx, msg)
		testenv.Must(t, err, "publish %s", id)
	}
	publish("ev.dl", "d1", "1")
	publish("ev.dl", "d2", "7")
	publish("ev.ack", "a1", "8")
	publish("ev.ack", "a2", "9")
	v := func(name string, labels ...string) float64 { return value(t, reg, name, labels...) }
	eventually(t, "all settled", func() bool { s := c.Stats(); return s.Handled == 1 && s.Unrouted == 3 })
	if got := v("txbox_consumer_unrouted_total", "binding", dl, "action", "dead_lettered"); got != 1 {
		t.Errorf("unrouted dead-lettered on %s = %v, want 1", dl, got)
	}
	if got := v("txbox_consumer_unrouted_total", "binding", ack, "action", "acked"); got != 2 {
		t.Errorf("unrouted acked on %s = %v, want 2", ack, got)
	}
}
