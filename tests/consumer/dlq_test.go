package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
)

// TestDeadLettersListRedriveDiscard, on each broker with a dlq.Store: an
// inbox handler fails two messages until they are dead-lettered; the
// store lists them (what failed, the binding, the deliveries, the error,
// the payload), pages and filters them, shows one, discards one; the
// handler is fixed and the other is redriven: the handler gets it on its
// binding with its original message id, and a second binding of the same
// stream (JetStream, Redis, Kafka) does not get it again, nor the retries
// of the first (Kafka).
func TestDeadLettersListRedriveDiscard(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"nats", "rabbitmq", "redis", "kafka"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := newBroker(t, kind)
			if kind == "kafka" {
				// One partition: a message published after the redrive
				// comes after the redriven copy for every group.
				b = kafkaBroker(t, 1)
			}
			deadLettersListRedriveDiscard(t, pgxDB(t, 10), b)
		})
	}
}

func deadLettersListRedriveDiscard(t *testing.T, d db[pgx.Tx], b *broker) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d.migrateAll(t)
	binding := b.binding("orders")

	// A second binding on the same messages, where the broker has them.
	other := ""
	switch b.name {
	case "nats":
		stream, _, err := natsjs.ParseBinding(binding)
		testenv.Must(t, err, "binding")
		nc := testenv.NATS(t)
		info, err := natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: "audit"})
		testenv.Must(t, err, "audit durable")
		other = natsjs.Binding(stream, info.CachedInfo().Name)
	case "redis":
		stream, _, err := redisstream.ParseBinding(binding)
		testenv.Must(t, err, "binding")
		testenv.Must(t, redisstream.EnsureGroup(ctx, testenv.Redis(t), stream, "audit", "0"), "audit group")
		other = redisstream.Binding(stream, "audit")
	case "kafka":
		topic, _, err := txboxkafka.ParseBinding(binding)
		testenv.Must(t, err, "binding")
		other = txboxkafka.Binding(topic, "audit")
	}

	var mu sync.Mutex
	fixed := false
	handled := map[string][]string{} // payload → the ids it was handled with
	audited := map[string]int{}      // id → times the other binding saw it
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, MaxDeliveries: 2,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: quiet})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "orders", Binding: binding},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			p := string(msg.Payload)
			if strings.HasPrefix(p, "fail") && !fixed {
				return errors.New("cannot ship " + p + "\x1b[31m")
			}
			handled[p] = append(handled[p], msg.ID)
			return nil
		}), "register orders")
	if other != "" {
		testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "audit", Binding: other},
			func(ctx context.Context, msg consumer.Message) error {
				mu.Lock()
				audited[msg.ID]++
				mu.Unlock()
				return nil
			}), "register audit")
	}
	testenv.Must(t, c.Start(ctx), "start consumer")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	msgs := []txbox.Message{
		{ID: "dl-1", Topic: b.topic("orders"), Payload: []byte("fail-1")},
		{ID: "dl-2", Topic: b.topic("orders"), Payload: []byte("fail-2")},
		{ID: "ok-1", Topic: b.topic("orders"), Payload: []byte("ok-1")},
	}
	for _, err := range b.pub.Publish(ctx, msgs) {
		testenv.Must(t, err, "publish")
	}
	list := func(q dlq.Query) dlq.Page {
		t.Helper()
		p, err := b.dead.List(ctx, binding, q)
		testenv.Must(t, err, "list")
		return p
	}
	eventually(t, "two dead letters", func() bool { return len(list(dlq.Query{Limit: 10}).Letters) == 2 })

	p := list(dlq.Query{Limit: 10})
	if p.More {
		t.Fatalf("a page of 2 under a limit of 10 says it was cut")
	}
	// Dead-lettered concurrently: in either order.
	slices.SortFunc(p.Letters, func(a, b dlq.Letter) int { return strings.Compare(a.ID, b.ID) })
	for i, l := range p.Letters {
		want := msgs[i]
		if l.ID != want.ID || string(l.Payload) != string(want.Payload) || l.Binding != binding ||
			!strings.HasSuffix(l.Topic, want.Topic) || l.Deliveries < 2 || !strings.Contains(l.Error, "cannot ship "+string(want.Payload)) {
			t.Fatalf("dead letter %d = %+v, want id %s, payload %s, binding %s, topic …%s, >= 2 deliveries, its error", i, l, want.ID, want.Payload, binding, want.Topic)
		}
		if l.Ref == "" {
			t.Fatalf("dead letter %d has no ref", i)
		}
	}
	// Paging.
	first := list(dlq.Query{Limit: 1})
	if len(first.Letters) != 1 || !first.More {
		t.Fatalf("first page of 1 = %+v, want one letter and More", first)
	}
	second := list(dlq.Query{Limit: 1, After: first.Letters[0].Ref})
	if len(second.Letters) != 1 || second.More || second.Letters[0].ID == first.Letters[0].ID {
		t.Fatalf("second page = %+v, want the other letter and no more", second)
	}
	// Filters.
	if f := list(dlq.Query{Limit: 10, Filter: dlq.Filter{Error: "fail-2"}}); len(f.Letters) != 1 || f.Letters[0].ID != "dl-2" {
		t.Fatalf("--error fail-2 = %+v, want dl-2", f.Letters)
	}
	if f := list(dlq.Query{Limit: 10, Filter: dlq.Filter{Topic: "no.such.topic"}}); len(f.Letters) != 0 {
		t.Fatalf("an unknown topic matched %+v", f.Letters)
	}
	// Show.
	got, err := b.dead.Get(ctx, binding, p.Letters[1].Ref)
	testenv.Must(t, err, "get")
	if got.ID != "dl-2" || string(got.Payload) != "fail-2" {
		t.Fatalf("get %s = %+v, want dl-2", p.Letters[1].Ref, got)
	}
	if _, err := b.dead.Get(ctx, binding, "999999"); !errors.Is(err, dlq.ErrNotFound) {
		t.Fatalf("get of an unknown ref: %v, want dlq.ErrNotFound", err)
	}

	// Discard dl-2.
	r, err := b.dead.Discard(ctx, binding, []string{p.Letters[1].Ref})
	testenv.Must(t, err, "discard")
	if len(r.Done) != 1 || len(r.Missed) != 0 {
		t.Fatalf("discard = %+v, want one done", r)
	}
	if left := list(dlq.Query{Limit: 10}); len(left.Letters) != 1 || left.Letters[0].ID != "dl-1" {
		t.Fatalf("after discarding dl-2: %+v, want dl-1 alone", left.Letters)
	}

	// Fix the handler, redrive dl-1.
	mu.Lock()
	fixed = true
	mu.Unlock()
	r, err = b.dead.Redrive(ctx, binding, []string{p.Letters[0].Ref, p.Letters[1].Ref})
	testenv.Must(t, err, "redrive")
	if !slices.Equal(r.Done, []string{p.Letters[0].Ref}) || !slices.Equal(r.Missed, []string{p.Letters[1].Ref}) {
		t.Fatalf("redrive = %+v, want %s done and %s (discarded) missed", r, p.Letters[0].Ref, p.Letters[1].Ref)
	}
	eventually(t, "the redriven message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled["fail-1"]) > 0
	})
	if left := list(dlq.Query{Limit: 10}); len(left.Letters) != 0 {
		t.Fatalf("dead letters left after the redrive: %+v", left.Letters)
	}
	if other != "" {
		// A message published after the redrive: once the other binding has
		// it, it has passed the redriven copy.
		for _, err := range b.pub.Publish(ctx, []txbox.Message{{ID: "after", Topic: b.topic("orders"), Payload: []byte("after")}}) {
			testenv.Must(t, err, "publish")
		}
		eventually(t, "the other binding's handler reaches the later message", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return audited["after"] > 0
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(handled["fail-1"], []string{"dl-1"}) || len(handled["fail-2"]) != 0 {
		t.Fatalf("handled %v, want fail-1 once with its original id dl-1, fail-2 never", handled)
	}
	if other != "" && audited["dl-1"] != 1 {
		t.Fatalf("the other binding saw dl-1 %d times, want once: the redrive is for %s only", audited["dl-1"], binding)
	}
}
