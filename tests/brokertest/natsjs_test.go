package brokertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// jsReader reads a subject of a stream with an ordered consumer.
type jsReader struct {
	s      jetstream.Stream
	prefix string
}

func (r jsReader) Read(ctx context.Context, topic string, n int) ([]brokertest.Delivery, error) {
	c, err := r.s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.prefix + topic}})
	if err != nil {
		return nil, err
	}
	var out []brokertest.Delivery
	for len(out) < n {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		batch, err := c.Fetch(n-len(out), jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			return out, err
		}
		for m := range batch.Messages() {
			d := brokertest.Delivery{ID: m.Headers().Get(jetstream.MsgIDHeader), Payload: m.Data(), Headers: map[string]string{}}
			for k, v := range m.Headers() {
				if k != jetstream.MsgIDHeader {
					d.Headers[k] = v[0]
				}
			}
			out = append(out, d)
		}
	}
	return out, nil
}

func natsSuite(t *testing.T) (brokertest.NewFunc, brokertest.Features) {
	nc := testenv.NATS(t)
	f := brokertest.Features{
		Dedupe: true, PerKeyOrder: true, Headers: true,
		// Over the server's max payload (1 MB by default).
		Reject: func(t *testing.T, topic string) txbox.Message {
			return txbox.Message{ID: "rejected-" + topic, Topic: topic, Payload: make([]byte, nc.MaxPayload()+1)}
		},
	}
	return func(t *testing.T) (txbox.Publisher, brokertest.Reader) {
		prefix := testenv.Subject()
		js, err := jetstream.New(nc)
		testenv.Must(t, err, "jetstream")
		name := testenv.Name("BT")
		s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"}, Storage: jetstream.MemoryStorage})
		testenv.Must(t, err, "create stream")
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
		p, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: prefix})
		testenv.Must(t, err, "publisher")
		return p, jsReader{s, prefix}
	}, f
}

// The reference publisher passes the suite it set the bar for.
func TestNATSJetStream(t *testing.T) {
	t.Parallel()
	newPub, f := natsSuite(t)
	brokertest.TestPublisher(t, newPub, f)
}

func TestNATSJetStreamRelay(t *testing.T) {
	t.Parallel()
	newPub, f := natsSuite(t)
	brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, f)
}
