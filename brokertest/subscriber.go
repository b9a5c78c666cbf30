package brokertest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

// NewSubscriberFunc returns, on a broker isolated for t, a publisher, a
// subscriber, and a binding that exists and receives every message the
// publisher sends to topic.
type NewSubscriberFunc func(t *testing.T, topic string) (txbox.Publisher, txbox.Subscriber, string)

// SubscriberFeatures says what a subscriber's broker supports.
type SubscriberFeatures struct {
	// ReadDead, when set, returns the ids of the messages dead-lettered
	// from binding; nil skips that check.
	ReadDead func(t *testing.T, binding string) []string
	// MissingBinding returns a binding like binding that does not exist on
	// the broker. Default: binding + "x" + a number.
	MissingBinding func(binding string) string
	// BreakDeadLetters, when set, makes binding's dead-letter destination
	// refuse or drop what is sent there (deletes the queue or stream it
	// routes to). The suite then checks that DeadLetter reports the failure
	// and leaves the message to be delivered again instead of settling it
	// with no copy kept. Nil skips that test.
	BreakDeadLetters func(t *testing.T, binding string)
	// Timeout bounds each wait for a delivery. Default: 30s.
	Timeout time.Duration
}

// TestSubscriber runs the txbox.Subscriber conformance tests as
// parallel subtests: ack, retry with a delivery count, dead letter, the
// binding check, and release of unreturned messages on Close.
func TestSubscriber(t *testing.T, newSub NewSubscriberFunc, f SubscriberFeatures) {
	if f.Timeout == 0 {
		f.Timeout = 30 * time.Second
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, newSub NewSubscriberFunc, f SubscriberFeatures)
	}{
		{"AckedNotRedelivered", testAcked},
		{"RetryRedelivers", testRetry},
		{"DeadLetter", testDeadLetter},
		{"DeadLetterNowhereKeepsMessage", testDeadLetterNowhere},
		{"CheckBinding", testCheckBinding},
		{"ExtendDeadline", testExtendDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newSub, f)
		})
	}
}

func next(t *testing.T, f SubscriberFeatures, s txbox.Subscription) txbox.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	for {
		d, err := s.Next(ctx)
		if err == nil {
			return d
		}
		if ctx.Err() != nil {
			t.Fatalf("no delivery: %v", err)
		}
	}
}

func subscribe(t *testing.T, sub txbox.Subscriber, binding string) txbox.Subscription {
	t.Helper()
	s, err := sub.Subscribe(context.Background(), binding, 4)
	if err != nil {
		t.Fatalf("subscribe %s: %v", binding, err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func msgs(topic string, ids ...string) []txbox.Message {
	var out []txbox.Message
	for _, id := range ids {
		out = append(out, txbox.Message{ID: id, Topic: topic, Payload: []byte(id), Headers: map[string]string{"h": id}})
	}
	return out
}

// testAcked: acked messages are not delivered again; a later one is next.
func testAcked(t *testing.T, newSub NewSubscriberFunc, f SubscriberFeatures) {
	tp := topic(t)
	p, sub, binding := newSub(t, tp)
	publish(t, p, msgs(tp, "a1", "a2", "a3")...)
	s := subscribe(t, sub, binding)
	got := map[string]bool{}
	for range 3 {
		d := next(t, f, s)
		m := d.Message()
		if m.Deliveries != 1 || string(m.Payload) != m.ID || m.Headers["h"] != m.ID || m.Binding != binding {
			t.Fatalf("delivery %+v", m)
		}
		got[m.ID] = true
		if err := d.Ack(context.Background()); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if len(got) != 3 {
		t.Fatalf("got %v", got)
	}
	publish(t, p, msgs(tp, "a4")...)
	if id := next(t, f, s).Message().ID; id != "a4" {
		t.Fatalf("after acking all, got %s, want a4", id)
	}
}

// testRetry: a retried message comes again with Deliveries 2.
func testRetry(t *testing.T, newSub NewSubscriberFunc, f SubscriberFeatures) {
	tp := topic(t)
	p, sub, binding := newSub(t, tp)
	publish(t, p, msgs(tp, "r1")...)
	s := subscribe(t, sub, binding)
	d := next(t, f, s)
	if err := d.Retry(context.Background(), 0); err != nil {
		t.Fatalf("retry: %v", err)
	}
	d = next(t, f, s)
	if m := d.Message(); m.ID != "r1" || m.Deliveries != 2 {
		t.Fatalf("after retry: %s with deliveries %d, want r1 and 2", m.ID, m.Deliveries)
	}
	if err := d.Ack(context.Background()); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

// testDeadLetter: a dead-lettered message is settled (a later message is
// next) and, where readable, lands in the dead letters.
func testDeadLetter(t *testing.T, newSub NewSubscriberFunc, f SubscriberFeatures) {
	tp := topic(t)
	p, sub, binding := newSub(t, tp)
	publish(t, p, msgs(tp, "d1")...)
	s := subscribe(t, sub, binding)
	d := next(t, f, s)
	if err := d.DeadLetter(context.Background(), errors.New("poison")); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	publish(t, p, msgs(tp, "d2")...)
	if id := next(t, f, s).Message().ID; id != "d2" {
		t.Fatalf("after dead-lettering d1, got %s, want d2", id)
	}
	if f.ReadDead != nil {
		dead := f.ReadDead(t, binding)
		if len(dead) != 1 || dead[0] != "d1" {
			t.Fatalf("dead letters %v, want [d1]", dead)
		}
	}
}

// testDeadLetterNowhere: a dead letter that cannot be stored is an error,
// and the original is not settled: it comes again.
func testDeadLetterNowhere(t *testing.T, newSub NewSubscriberFunc, f SubscriberFeatures) {
	if f.BreakDeadLetters == nil {
		t.Skip("no way to break this broker's dead letters")
	}
	tp := topic(t)
	p, sub, binding := newSub(t, tp)
	publish(t, p, msgs(tp, "n1")...)
	s := subscribe(t, sub, binding)
	d := next(t, f, s)
	f.BreakDeadLetters(t, binding)
	if err := d.DeadLetter(context.Background(), errors.New("poison")); err == nil {
		t.Fatal("dead letter to a destination that cannot store it: nil error, want the failure reported")
	}
	if m := next(t, f, s).Message(); m.ID != "n1" {
		t.Fatalf("after a failed dead letter, got %s, want n1 again", m.ID)
	}
}

// testCheckBinding: the binding checks out; a missing one is an error.
func testCheckBinding(t *testing.T, newSub NewSubscriberFunc, f SubscriberFeatures) {
	tp := topic(t)
	_, sub, binding := newSub(t, tp)
	if err := sub.CheckBinding(context.Background(), binding); err != nil {
		t.Fatalf("CheckBinding(%s): %v", binding, err)
	}
	missing := binding + "x" + strconv.Itoa(int(seq.Add(1)%1000))
	if f.MissingBinding != nil {
		missing = f.MissingBinding(binding)
	}
	if err := sub.CheckBinding(context.Background(), missing); err == nil {
		t.Fatalf("CheckBinding(%s) of a missing binding: nil", missing)
	}
}
