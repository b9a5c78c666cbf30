package redisstream_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
)

// The consumer runtime over Redis Streams: a failing message is retried
// with a higher delivery count, a permanent failure is dead-lettered, and
// a missing group is a startup error.
func TestConsumerRuntime(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txbc") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream := prefix + "orders"
	sub, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: "c1", Block: 50 * time.Millisecond, AckWait: 100 * time.Millisecond})
	testenv.Must(t, err, "subscriber")

	// No group yet: Start refuses.
	c, err := consumer.New[pgx.Tx](nil, consumer.Config{Broker: sub})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "h", Binding: redisstream.Binding(stream, "billing")}, func(context.Context, consumer.Message) error { return nil }), "handle")
	if err := c.Start(ctx); err == nil {
		_ = c.Stop(ctx)
		t.Fatal("Start with a missing group succeeded")
	}

	testenv.Must(t, redisstream.EnsureGroup(ctx, rdb, stream, "billing", "0"), "group")
	p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	var mu sync.Mutex
	seen := map[string][]int{}
	done := make(chan struct{})
	c, err = consumer.New[pgx.Tx](nil, consumer.Config{Broker: sub, BackoffBase: 10 * time.Millisecond, MaxDeliveries: 5})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "h", Binding: redisstream.Binding(stream, "billing")}, func(_ context.Context, m consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.ID] = append(seen[m.ID], m.Deliveries)
		switch {
		case m.ID == "flaky" && m.Deliveries == 1:
			return errors.New("try again")
		case m.ID == "poison":
			return consumer.Permanent(errors.New("cannot parse"))
		}
		if len(seen["ok"]) > 0 && len(seen["flaky"]) == 2 && len(seen["poison"]) == 1 {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	}), "handle")
	testenv.Must(t, c.Start(ctx), "start")
	defer func() { _ = c.Stop(context.Background()) }()
	if errs := p.Publish(ctx, []txbox.Message{
		{ID: "poison", Topic: "orders", Payload: []byte("?")},
		{ID: "flaky", Topic: "orders", Payload: []byte("1")},
		{ID: "ok", Topic: "orders", Payload: []byte("2")},
	}); errs != nil {
		t.Fatal(errs)
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("not all handled: %v", seen)
	}
	mu.Lock()
	if got := seen["flaky"]; len(got) != 2 || got[1] != 2 {
		t.Errorf("flaky deliveries %v, want [1 2]", got)
	}
	mu.Unlock()
	for {
		dead, err := rdb.XRange(ctx, stream+":dead", "-", "+").Result()
		testenv.Must(t, err, "dead stream")
		if len(dead) == 1 {
			if dead[0].Values["id"] != "poison" {
				t.Fatalf("dead letter %v", dead[0].Values)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("poison not dead-lettered")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestSubscriberConformance(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txbsc") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	brokertest.TestSubscriber(t, func(t *testing.T, topic string) (txbox.Publisher, txbox.Subscriber, string) {
		p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
		testenv.Must(t, err, "publisher")
		testenv.Must(t, redisstream.EnsureGroup(context.Background(), rdb, prefix+topic, "g", "0"), "group")
		s, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: "c", Block: 50 * time.Millisecond, AckWait: 10 * time.Second})
		testenv.Must(t, err, "subscriber")
		return p, s, redisstream.Binding(prefix+topic, "g")
	}, brokertest.SubscriberFeatures{ReadDead: func(t *testing.T, binding string) []string {
		xs, err := rdb.XRange(context.Background(), strings.TrimSuffix(binding, "/g")+":dead", "-", "+").Result()
		testenv.Must(t, err, "xrange")
		var ids []string
		for _, x := range xs {
			ids = append(ids, x.Values["id"].(string))
		}
		return ids
	}})
}
