package txboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
)

// Outcome is what became of a delivery.
type Outcome int

// The outcomes.
const (
	// Acked: the handler succeeded and the message was acknowledged.
	Acked Outcome = iota + 1
	// Duplicate: the inbox had already processed the message id under the
	// handler's name; it was acknowledged without running the handler.
	Duplicate
	// Retried: the handler failed and the message was released for
	// redelivery.
	Retried
	// DeadLettered: the handler failed for good (consumer.Permanent, the
	// last delivery) and the message went to the dead letters.
	DeadLettered
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Duplicate:
		return "duplicate"
	case Retried:
		return "retried"
	case DeadLettered:
		return "dead-lettered"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// DeliverOpts are the options of Deliver; nil means the defaults.
type DeliverOpts struct {
	// Final follows the message through its retries: Deliver returns at
	// its last settlement, acknowledged or dead-lettered (each retry's
	// delay is capped by BrokerConfig.MaxRetryDelay). Default: false, the
	// first delivery's outcome.
	Final bool
}

// Result is what Deliver saw.
type Result struct {
	// Outcome is the outcome of the last delivery Deliver waited for.
	Outcome Outcome
	// Deliveries is that delivery's count: 1 for the first.
	Deliveries int
	// Settlements are the message's settlements by the broker, in order
	// (with Final, one per delivery). A broker sees a duplicate as Acked.
	Settlements []Settlement
}

// Deliver hands msg to binding's subscriber, c's handler of binding, and
// waits until the handler's outcome is settled. msg goes to binding
// directly, whatever its topic and the broker's dedupe window, so that
// delivering a message twice tests the inbox's dedupe. An empty msg.ID gets
// a random one. Deliver starts c if it was not started (and stops it when
// the test ends); c must use b as its Broker.
//
// Deliver fails tb when the broker saw nothing happen for its
// InactivityTimeout (the handler is stuck, or c has no handler on
// binding). Deliver one message at a time to a consumer: a duplicate is
// told apart from an acknowledgement by c's Stats.
func Deliver[TTx any](ctx context.Context, tb TB, b *Broker, c *consumer.Consumer[TTx], binding string, msg txbox.Message, opts *DeliverOpts) Result {
	tb.Helper()
	if err := b.CheckBinding(ctx, binding); err != nil {
		fail(tb, "Deliver: %v", err)
		return Result{}
	}
	if err := c.Start(ctx); err == nil {
		tb.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.Stop(ctx)
		})
	} else if !errors.Is(err, consumer.ErrStarted) {
		fail(tb, "Deliver: start the consumer: %v", err)
		return Result{}
	}
	if msg.ID == "" {
		var r [8]byte
		_, _ = rand.Read(r[:])
		msg.ID = "txboxtest-" + hex.EncodeToString(r[:])
	}
	dupes := c.Stats().Duplicates

	b.mu.Lock()
	it := b.enqueue(b.bindings[binding], msg)
	from := len(b.settled)
	b.notify()
	b.mu.Unlock()

	final := opts != nil && opts.Final
	var res Result
	err := b.wait(ctx, func() bool {
		res.Settlements = res.Settlements[:0]
		for _, st := range b.settled[from:] {
			if st.item == it.n {
				res.Settlements = append(res.Settlements, st)
			}
		}
		n := len(res.Settlements)
		return n > 0 && (!final || res.Settlements[n-1].Outcome != Retried)
	})
	if err != nil {
		fail(tb, "Deliver %s to %s: no outcome: %v (is c running with a handler on %q?); settlements so far: %v", msg.ID, binding, err, binding, res.Settlements)
		return res
	}
	last := res.Settlements[len(res.Settlements)-1]
	res.Outcome, res.Deliveries = last.Outcome, last.Deliveries
	if res.Outcome == Acked && c.Stats().Duplicates > dupes {
		res.Outcome = Duplicate
	}
	return res
}
