package natsjs

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
)

// DefaultAckWait is ConsumerConfig.AckWait's default. A subscription keeps
// the messages it holds alive (its lease, SubscriberConfig.Lease; without
// one, the consumer's InProgress), so the AckWait only bounds how long the
// unacked messages of a consumer that was killed wait before the server
// redelivers them, when it has no lease.
const DefaultAckWait = 10 * time.Second

var (
	_ txbox.DeadlineExtender = (*extendable)(nil)
	_ txbox.HorizonReporter  = (*Subscriber)(nil)
)

// extendable is a delivery without a lease (SubscriberConfig.Lease off,
// SubscribeOrdered): its deadline is the durable's AckWait, which the
// consumer extends while it holds the message.
type extendable struct {
	*delivery
	ackWait time.Duration
}

// AckDeadline is the durable's AckWait.
func (d *extendable) AckDeadline() time.Duration { return d.ackWait }

// ExtendDeadline tells the server that the message is still being worked
// on (InProgress): its AckWait starts again.
func (d *extendable) ExtendDeadline(context.Context) error { return d.m.InProgress() }

// tuneAckWait gives the durable c the Subscriber's AckWait, if one is set
// and the durable's differs.
func (s *Subscriber) tuneAckWait(ctx context.Context, stream string, c jetstream.Consumer) (jetstream.Consumer, error) {
	cc := c.CachedInfo().Config
	if s.ackWait == 0 || cc.AckWait == s.ackWait {
		return c, nil
	}
	cc.AckWait = s.ackWait
	c, err := s.js.UpdateConsumer(ctx, stream, cc)
	if err != nil {
		return nil, fmt.Errorf("natsjs: set AckWait %v on consumer %s/%s: %w", s.ackWait, stream, cc.Durable, err)
	}
	return c, nil
}

// Horizon reports how long a message of binding can reach the consumer
// again: as long as the stream keeps it (MaxAge; at least the duplicate
// window, past which a re-published copy is no longer dropped). A stream
// without MaxAge keeps messages until they are removed otherwise (limits,
// interest, by hand): the horizon is then unbounded (Age 0).
func (s *Subscriber) Horizon(ctx context.Context, binding string) (txbox.Horizon, error) {
	stream, _, err := ParseBinding(binding)
	if err != nil {
		return txbox.Horizon{}, err
	}
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		return txbox.Horizon{}, fmt.Errorf("natsjs: stream %s: %w", stream, err)
	}
	cfg := st.CachedInfo().Config
	if cfg.MaxAge <= 0 {
		return txbox.Horizon{Detail: fmt.Sprintf("stream %s has no MaxAge: it can redeliver or replay a message however old", stream)}, nil
	}
	return txbox.Horizon{Age: max(cfg.MaxAge, cfg.Duplicates),
		Detail: fmt.Sprintf("stream %s: MaxAge %v, duplicate window %v", stream, cfg.MaxAge, cfg.Duplicates)}, nil
}
