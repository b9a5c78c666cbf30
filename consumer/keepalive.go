package consumer

import (
	"context"
	"log/slog"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/keepalive"
)

// minKeepAlive bounds how often a delivery's deadline is extended.
const minKeepAlive = 50 * time.Millisecond

// keepAlive returns d, wrapped, when its broker redelivers unsettled
// deliveries after a deadline that can be extended
// (txbox.DeadlineExtender): until d is settled, its deadline is extended
// every third of it, so that neither a long handler nor a wait for a free
// worker lets the broker hand a second copy to another worker or replica.
// The wrapper stops extending before it settles, so a late extension can
// never undo a Retry's delay.
func (c *Consumer[TTx]) keepAlive(d txbox.Delivery) txbox.Delivery {
	x, ok := d.(txbox.DeadlineExtender)
	if !ok || c.cfg.NoKeepAlive {
		return d
	}
	wait := x.AckDeadline()
	if wait <= 0 {
		return d
	}
	k := &keptAlive{Delivery: d, x: x, every: max(wait/3, minKeepAlive), log: c.log}
	k.ticker = keepalive.Start(k.every, k.extend)
	return k
}

// keptAlive is a delivery whose ack deadline is extended until it is
// settled.
type keptAlive struct {
	txbox.Delivery
	x      txbox.DeadlineExtender
	every  time.Duration
	log    *slog.Logger
	ticker *keepalive.Ticker
	warned bool // extend's: its calls never overlap
}

// Unwrap returns the broker's delivery, for type assertions on optional
// capabilities.
func (k *keptAlive) Unwrap() txbox.Delivery { return k.Delivery }

func (k *keptAlive) extend() {
	ctx, cancel := context.WithTimeout(context.Background(), k.every)
	err := k.x.ExtendDeadline(ctx)
	cancel()
	if err != nil && !k.warned {
		k.warned = true // once per delivery: the broker may redeliver it
		m := k.Message()
		k.log.Warn("txbox/consumer: extending the ack deadline failed; the broker may redeliver the message while it is processed (the inbox makes that a duplicate)",
			"binding", m.Binding, "message_id", m.ID, "err", err)
	}
}

// stop ends the extensions; an extension under way finishes first.
func (k *keptAlive) stop() { k.ticker.Stop() }

func (k *keptAlive) Ack(ctx context.Context) error {
	k.stop()
	return k.Delivery.Ack(ctx)
}

func (k *keptAlive) Retry(ctx context.Context, delay time.Duration) error {
	k.stop()
	return k.Delivery.Retry(ctx, delay)
}

func (k *keptAlive) DeadLetter(ctx context.Context, cause error) error {
	k.stop()
	return k.Delivery.DeadLetter(ctx, cause)
}
