package natsjs

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
)

// SubscribeOrdered is Subscribe for a handler that keeps per-key order
// (consumer.HandlerConfig.Ordered; it implements consumer.OrderedSubscriber).
// JetStream redelivers a message left unacknowledged (its subscriber was
// killed) only once its AckWait has passed, and hands out later messages
// meanwhile: a restarted consumer would run a key's later message before
// the earlier one. So when the durable has messages pending an ack, the
// subscription pulls nothing until AckWait (and a quarter of it, for the
// server's timer) has passed from now: the server then redelivers them
// before any later message. The server counts messages naked at a
// graceful Stop as pending until they are redelivered, so a restart after
// one may wait too: at most AckWait and a quarter.
//
// This holds per-key order only when this subscription is the durable's
// only subscriber: JetStream spreads a durable's messages over all of its
// subscribers.
func (s *Subscriber) SubscribeOrdered(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	stream, durable, err := ParseBinding(binding)
	if err != nil {
		return nil, err
	}
	c, err := s.js.Consumer(ctx, stream, durable)
	if err != nil {
		return nil, fmt.Errorf("natsjs: consumer %s: %w", binding, err)
	}
	sub := &subscription{s: s, binding: binding, stream: stream, durable: durable, prefetch: max(prefetch, 1), cons: c, ordered: true}
	if info := c.CachedInfo(); info.NumAckPending > 0 {
		wait := info.Config.AckWait + info.Config.AckWait/4
		sub.holdUntil = time.Now().Add(wait)
		return sub, nil // Next opens the pull after the hold
	}
	if err := sub.open(); err != nil {
		return nil, err
	}
	return sub, nil
}

// hold waits until sub.holdUntil, or ctx's end.
func (sub *subscription) hold(ctx context.Context) error {
	d := time.Until(sub.holdUntil)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives m back for redelivery. An ordered subscription gives it back
// after releaseDelay: a message naked at once goes back to the same
// subscription's pull requests still open at the server while it closes,
// where it would be lost until its AckWait passed and so be overtaken by
// later messages; naked with a delay, the released messages are redelivered
// together, in stream order, once the subscription is gone.
func (sub *subscription) release(m jetstream.Msg) error {
	if !sub.ordered {
		return m.Nak()
	}
	return m.NakWithDelay(sub.releaseDelay())
}

// releaseDelay is half the durable's AckWait: the next ordered subscription
// holds its pulls for AckWait × 1.25 (see SubscribeOrdered), so the released
// messages are waiting for it by then.
func (sub *subscription) releaseDelay() time.Duration {
	sub.mu.Lock()
	c := sub.cons
	sub.mu.Unlock()
	if d := c.CachedInfo().Config.AckWait / 2; d > 0 {
		return d
	}
	return time.Second
}
