package natsjs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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
// one may wait too: at most AckWait and a quarter. The messages pending at
// the start are then gathered and handed out in stream order (see gather).
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
		sub.pending = info.NumAckPending
		return sub, nil // Next opens the pull after the hold, then gathers
	}
	sub.open()
	return sub, nil
}

// gather reads, after the hold, the messages that were pending at the
// start and sorts them by stream sequence. The server redelivers expired
// messages in the order their ack timers ran out, batch by batch, and a
// keep-alive (InProgress) restarts a message's timer: the killed
// subscriber's messages come back in the order of their last extension, not
// in stream order. Sorting them restores it.
//
// A message delivered for the first time meanwhile (a redelivery's timer
// ran out late: a busy server, or the old subscriber still alive) is held
// aside: it comes later in the stream than every message delivered before.
// gather waits for the redeliveries while the consumer has more messages
// pending an ack than it holds, keeping those it holds alive; it stops
// early only when they are fewer (some reached MaxDeliver, or were acked
// meanwhile).
func (sub *subscription) gather(ctx context.Context, p *puller) error {
	sub.mu.Lock()
	n, wait := sub.pending, max(sub.ackWait/4, 250*time.Millisecond)
	sub.pending = 0
	sub.mu.Unlock()
	var ms, fresh []jetstream.Msg
	for len(ms) < n {
		gctx, cancel := context.WithTimeout(ctx, wait)
		m, err := p.next(gctx)
		cancel()
		if err == nil && deliveries(m) == 1 {
			fresh = append(fresh, m)
			continue
		}
		if err == nil {
			ms = append(ms, m)
			continue
		}
		if ctx.Err() != nil {
			for _, m := range append(ms, fresh...) {
				_ = sub.release(m)
			}
			return ctx.Err()
		}
		if !sub.owed(ctx, len(ms)+len(fresh)) {
			break
		}
		for _, m := range append(ms, fresh...) {
			_ = m.InProgress()
		}
	}
	ms = append(ms, fresh...)
	sortByStream(ms)
	sub.mu.Lock()
	sub.gathered = append(sub.gathered, ms...)
	sub.mu.Unlock()
	return nil
}

// owed reports whether the durable has more messages pending an ack than
// the held ones this subscription holds: redeliveries still to come. When
// the consumer's state cannot be read it reports false.
func (sub *subscription) owed(ctx context.Context, held int) bool {
	info, err := sub.cons.Info(ctx)
	return err == nil && info.NumAckPending > held
}

// deliveries is how many times the server has delivered m (1 when its
// metadata cannot be read).
func deliveries(m jetstream.Msg) uint64 {
	if md, err := m.Metadata(); err == nil {
		return md.NumDelivered
	}
	return 1
}

func sortByStream(ms []jetstream.Msg) {
	slices.SortFunc(ms, func(a, b jetstream.Msg) int { return cmp.Compare(streamSeq(a), streamSeq(b)) })
}

// popGathered returns the next gathered message, or nil.
func (sub *subscription) popGathered() jetstream.Msg {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.gathered) == 0 {
		return nil
	}
	m := sub.gathered[0]
	sub.gathered = sub.gathered[1:]
	return m
}

func streamSeq(m jetstream.Msg) uint64 {
	if md, err := m.Metadata(); err == nil {
		return md.Sequence.Stream
	}
	return 0
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
	sub.unlease(m)
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
