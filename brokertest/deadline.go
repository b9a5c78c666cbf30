package brokertest

import (
	"context"
	"testing"

	"github.com/txbox/txbox"
)

// testExtendDeadline: where deliveries have an extendable ack deadline
// (txbox.DeadlineExtender), it is positive, extending it succeeds while the
// delivery is unsettled, and an extension counts no delivery (a retry
// comes back with Deliveries 2). Skipped for brokers without one.
func testExtendDeadline(t *testing.T, newSub NewSubscriberFunc, f SubscriberFeatures) {
	tp := topic(t)
	p, sub, binding := newSub(t, tp)
	publish(t, p, msgs(tp, "x1")...)
	s := subscribe(t, sub, binding)
	d := next(t, f, s)
	x, ok := d.(txbox.DeadlineExtender)
	if !ok {
		_ = d.Ack(context.Background())
		t.Skipf("%T has no extendable ack deadline", d)
	}
	if x.AckDeadline() <= 0 {
		t.Fatalf("AckDeadline %v, want > 0", x.AckDeadline())
	}
	for range 2 {
		if err := x.ExtendDeadline(context.Background()); err != nil {
			t.Fatalf("ExtendDeadline of an unsettled delivery: %v", err)
		}
	}
	if err := d.Retry(context.Background(), 0); err != nil {
		t.Fatalf("retry: %v", err)
	}
	d = next(t, f, s)
	if m := d.Message(); m.ID != "x1" || m.Deliveries != 2 {
		t.Fatalf("after two extensions and a retry: %s with deliveries %d, want x1 and 2", m.ID, m.Deliveries)
	}
	if err := d.Ack(context.Background()); err != nil {
		t.Fatalf("ack: %v", err)
	}
}
