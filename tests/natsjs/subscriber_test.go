package natsjs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// CheckBinding names what is wrong with a binding: a missing stream or
// durable, a push consumer or one without explicit acks, no stream for the
// dead letters; and accepts a sound one.
func TestCheckBinding(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t)
	ctx := context.Background()
	prefix := testenv.Subject()
	stream := strings.ToUpper(testenv.Name("CB"))
	_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "ev.>"}})
	testenv.Must(t, err, "stream")
	js, _ := jetstream.New(nc)
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), stream)
		_ = js.DeleteStream(context.Background(), stream+"_DLQ")
	})
	_, err = natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: "good"})
	testenv.Must(t, err, "consumer")
	_, err = js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "noack", AckPolicy: jetstream.AckNonePolicy})
	testenv.Must(t, err, "consumer without acks")
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
	testenv.Must(t, err, "subscriber")

	for binding, want := range map[string][]string{
		"nope":                                 {"not STREAM/durable"},
		natsjs.Binding("NO_SUCH_"+stream, "x"): {"stream NO_SUCH_" + stream + " does not exist"},
		natsjs.Binding(stream, "missing"):      {"durable consumer missing does not exist", "no stream captures the dead-letter subject"},
		natsjs.Binding(stream, "noack"):        {"ack policy", "no stream captures"},
		natsjs.Binding(stream, "good"):         {"no stream captures the dead-letter subject " + prefix + "dlq." + stream + ".good"},
	} {
		err := sub.CheckBinding(ctx, binding)
		if err == nil {
			t.Errorf("%s: no error, want %q", binding, want)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to mention %q", binding, err, w)
			}
		}
	}
	_, err = natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream + "_DLQ", Subjects: []string{prefix + "dlq.>"}})
	testenv.Must(t, err, "dlq stream")
	testenv.Must(t, sub.CheckBinding(ctx, natsjs.Binding(stream, "good")), "a sound binding")
}
