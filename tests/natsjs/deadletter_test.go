package natsjs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// TestDeadLettersOnePerBinding: a message dead-lettered twice from one
// binding (its first holder stalled past AckWait, or was killed between
// the dead letter's publish and the Term, and the redelivery is
// dead-lettered again) leaves one copy in the dead letters' stream; the
// same message dead-lettered from two bindings leaves one copy for each.
func TestDeadLettersOnePerBinding(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := testenv.Subject()
	stream := strings.ToUpper(testenv.Name("DL"))
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	_, err = natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "ev.>"}})
	testenv.Must(t, err, "stream")
	dlq, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream + "_DLQ", Subjects: []string{prefix + "dlq.>"}})
	testenv.Must(t, err, "dead letters' stream")
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), stream)
		_ = js.DeleteStream(context.Background(), stream+"_DLQ")
	})
	m := nats.NewMsg(prefix + "ev.orders")
	m.Header.Set(jetstream.MsgIDHeader, "poison-1")
	m.Data = []byte("x")
	_, err = js.PublishMsg(ctx, m)
	testenv.Must(t, err, "publish")

	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
	testenv.Must(t, err, "subscriber")
	poison := errors.New("poison")
	for _, durable := range []string{"a", "b"} {
		// A short AckWait: the first delivery, not kept alive, comes again.
		_, err := natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: durable, AckWait: time.Second})
		testenv.Must(t, err, "consumer %s", durable)
		// A prefetch of 2: room for the redelivery while the first is held.
		s, err := sub.Subscribe(ctx, natsjs.Binding(stream, durable), 2)
		testenv.Must(t, err, "subscribe %s", durable)
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		first, err := s.Next(ctx)
		testenv.Must(t, err, "next from %s", durable)
		again, err := s.Next(ctx)
		testenv.Must(t, err, "redelivery from %s", durable)
		for _, d := range []txbox.Delivery{again, first} {
			testenv.Must(t, d.DeadLetter(ctx, poison), "dead-letter from %s", durable)
		}
	}
	info, err := dlq.Info(ctx)
	testenv.Must(t, err, "dead letters' stream info")
	if info.State.Msgs != 2 {
		t.Fatalf("%d dead letters, want 2: one per binding", info.State.Msgs)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		raw, err := dlq.GetMsg(ctx, info.State.FirstSeq+seq-1)
		testenv.Must(t, err, "dead letter %d", seq)
		if raw.Header.Get(txbox.HeaderMessageID) != "poison-1" {
			t.Errorf("dead letter %d: %s %q, want poison-1", seq, txbox.HeaderMessageID, raw.Header.Get(txbox.HeaderMessageID))
		}
	}
}
