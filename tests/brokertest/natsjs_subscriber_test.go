package brokertest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// The JetStream subscriber, with its dead letters captured by the same
// stream as the messages (a setup CheckBinding accepts).
func TestNATSJetStreamSubscriber(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	readDead := func(t *testing.T, s jetstream.Stream, subject string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
		testenv.Must(t, err, "ordered consumer")
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		testenv.Must(t, err, "fetch")
		var ids []string
		for m := range batch.Messages() {
			ids = append(ids, m.Headers().Get(txbox.HeaderMessageID))
		}
		return ids
	}
	streams := map[string]jetstream.Stream{}
	var subs = map[string]*natsjs.Subscriber{}
	brokertest.TestSubscriber(t, func(t *testing.T, topic string) (txbox.Publisher, txbox.Subscriber, string) {
		ctx := context.Background()
		prefix := testenv.Subject()
		name := testenv.Name("BTS")
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ">"}, Storage: jetstream.MemoryStorage})
		testenv.Must(t, err, "create stream")
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
		_, err = natsjs.EnsureConsumer(ctx, nc, name, natsjs.ConsumerConfig{Durable: "d", FilterSubjects: []string{prefix + topic}})
		testenv.Must(t, err, "consumer")
		p, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: prefix})
		testenv.Must(t, err, "publisher")
		sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
		testenv.Must(t, err, "subscriber")
		binding := natsjs.Binding(name, "d")
		mu.Lock()
		streams[binding], subs[binding] = s, sub
		mu.Unlock()
		return p, sub, binding
	}, brokertest.SubscriberFeatures{ReadDead: func(t *testing.T, binding string) []string {
		mu.Lock()
		s, sub := streams[binding], subs[binding]
		mu.Unlock()
		return readDead(t, s, sub.DeadLetterSubject(binding))
	}})
}

var mu sync.Mutex
