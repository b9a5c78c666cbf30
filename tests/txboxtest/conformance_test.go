// Package txboxtest_test runs txboxtest's in-memory Broker through the
// broker conformance suites, and tests the kit's assertions and harnesses
// on real databases.
package txboxtest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// refuse makes the broker reject every message of a topic with a ".bad"
// token, as brokertest's Reject feature asks.
func refuse(m txbox.Message) error {
	if strings.Contains(m.Topic, ".bad") {
		return txbox.Reject(errors.New("topic refused"))
	}
	return nil
}

var features = brokertest.Features{
	Dedupe: true, PerKeyOrder: true, Headers: true,
	Reject: func(t *testing.T, topic string) txbox.Message {
		return txbox.Message{ID: "bad-" + topic, Topic: topic, Payload: []byte("refused")}
	},
}

// newPub returns a Broker and a Reader that consumes, as a consumer would,
// a binding of every topic the suite uses.
func newPub(t *testing.T) (txbox.Publisher, brokertest.Reader) {
	b := txboxtest.NewBroker(txboxtest.BrokerConfig{PublishError: refuse})
	b.Bind("reader", brokertest.TopicPrefix+">")
	s, err := b.Subscribe(context.Background(), "reader", 1)
	testenv.Must(t, err, "subscribe")
	c := brokertest.NewCollector()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			d, err := s.Next(ctx)
			if err != nil {
				return
			}
			m := d.Message()
			c.Add(m.Topic, brokertest.Delivery{ID: m.ID, Key: m.Key, Payload: m.Payload, Headers: m.Headers})
			_ = d.Ack(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = s.Close(context.Background())
	})
	return b, c
}

func TestPublisherConformance(t *testing.T) {
	t.Parallel()
	brokertest.TestPublisher(t, newPub, features)
}

func TestSubscriberConformance(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	brokers := map[string]*txboxtest.Broker{}
	broken := map[string]bool{}
	brokertest.TestSubscriber(t, func(t *testing.T, topic string) (txbox.Publisher, txbox.Subscriber, string) {
		binding := "q-" + topic
		b := txboxtest.NewBroker(txboxtest.BrokerConfig{DeadLetterError: func(dl txboxtest.DeadLetter) error {
			mu.Lock()
			defer mu.Unlock()
			if broken[dl.Binding] {
				return errors.New("dead-letter queue deleted")
			}
			return nil
		}})
		b.Bind(binding, topic)
		mu.Lock()
		brokers[binding] = b
		mu.Unlock()
		return b, b, binding
	}, brokertest.SubscriberFeatures{
		ReadDead: func(t *testing.T, binding string) []string {
			mu.Lock()
			b := brokers[binding]
			mu.Unlock()
			var ids []string
			for _, dl := range b.DeadLetters() {
				ids = append(ids, dl.Message.ID)
			}
			return ids
		},
		BreakDeadLetters: func(t *testing.T, binding string) {
			mu.Lock()
			defer mu.Unlock()
			broken[binding] = true
		},
	})
}

func TestRelayConformance(t *testing.T) {
	t.Parallel()
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, features)
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		brokertest.TestRelay(t, txboxsql.New(testenv.SQLite(t), txboxdriver.SQLite), newPub, features)
	})
}
