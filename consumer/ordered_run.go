package consumer

import (
	"context"
	"time"

	"github.com/txbox/txbox"
)

// orderedWorker is one worker of an Ordered handler: it runs the
// deliveries the fetch loop admits and the retries whose backoff has passed.
func (c *Consumer[TTx]) orderedWorker(fetchCtx, hardCtx context.Context, h *handler[TTx], g *keyGate, work <-chan txbox.Delivery) {
	for {
		select {
		case d, ok := <-work:
			if !ok {
				return
			}
			c.runOrdered(fetchCtx, hardCtx, h, g, newHeld(d, hardCtx))
		case hd := <-g.ready:
			c.runOrdered(fetchCtx, hardCtx, h, g, hd)
		}
	}
}

func newHeld(d txbox.Delivery, hardCtx context.Context) *heldDelivery {
	msg := d.Message()
	return &heldDelivery{Delivery: d, msg: msg, key: msg.Key, hard: hardCtx, since: time.Now()}
}

// runOrdered runs hd, then its key's later deliveries as they queue up, one
// at a time, until the key is idle, a delivery waits for its retry (the key
// stays busy: the retry comes back through g.ready), or the consumer stops
// (the run loop releases what is left queued).
func (c *Consumer[TTx]) runOrdered(fetchCtx, hardCtx context.Context, h *handler[TTx], g *keyGate, hd *heldDelivery) {
	for {
		if !c.processOrdered(fetchCtx, hardCtx, h, g, hd) {
			return
		}
		g.settled()
		if hd.key == "" || fetchCtx.Err() != nil {
			return
		}
		d, ok := g.next(hd.key)
		if !ok {
			return
		}
		hd = newHeld(d, hardCtx)
	}
}

// processOrdered processes one delivery of an Ordered handler. A failure
// that would go back to the broker is retried in process instead, after the
// same backoff, with the delivery held unacknowledged (a redelivery could be
// overtaken by the key's later messages): processOrdered then returns false
// and the retry waits off the worker, in awaitRetry. A dead letter parks the
// key unless h.DeadKey is ContinueKey; a parked key's deliveries are
// dead-lettered with a *KeyParkedError without running. A retry the gate
// set aside (keyGate.watch) is dead-lettered without running, with its
// *KeyHeldError, as if it had reached MaxDeliveries.
func (c *Consumer[TTx]) processOrdered(fetchCtx, hardCtx context.Context, h *handler[TTx], g *keyGate, hd *heldDelivery) bool {
	if hd.aside != nil {
		c.deadLetterHeld(h, hd)
		c.parkAfterDead(h, g, hd, hd.aside)
		return true
	}
	if hd.key != "" {
		if perr := g.parkedBy(hd.key); perr != nil {
			c.deadLetterParked(h, hd.Delivery, perr)
			return true
		}
	}
	hd.retry, hd.dead, hd.counted, hd.err = false, nil, false, nil
	c.process(hardCtx, h, hd)
	switch {
	case hd.dead != nil:
		c.parkAfterDead(h, g, hd, hd.dead)
		return true
	case !hd.retry:
		if hd.err == nil {
			g.success() // acknowledged (or released at Stop, where nothing is set aside)
		}
		return true
	}
	g.waiting.Add(1)
	hd.setAside = make(chan struct{})
	if hd.key != "" && hd.counted {
		g.hold(hd)
	}
	go c.awaitRetry(fetchCtx, g, hd)
	return false
}

// parkAfterDead parks hd's key after hd was dead-lettered for cause,
// unless h.DeadKey is ContinueKey.
func (c *Consumer[TTx]) parkAfterDead(h *handler[TTx], g *keyGate, hd *heldDelivery, cause error) {
	if hd.key != "" && h.DeadKey == ParkKey {
		g.park(hd.key, hd.msg.ID, cause)
		c.log.Warn("txbox/consumer: key parked: its later messages are dead-lettered without running until ReleaseKey",
			"handler", h.Name, "key", hd.key, "message_id", hd.msg.ID)
	}
}

// deadLetterHeld dead-letters hd, set aside by the gate, without running
// it again.
func (c *Consumer[TTx]) deadLetterHeld(h *handler[TTx], hd *heldDelivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.dead.Add(1)
	c.failures.forget(h.Name, hd.msg.ID)
	c.log.Error("txbox/consumer: dead-lettering a failing message that held the consumer's window, so that the other keys go on",
		"handler", h.Name, "key", hd.key, "message_id", hd.msg.ID, "err", hd.aside)
	if err := hd.Delivery.DeadLetter(ctx, hd.aside); err != nil {
		c.ackFailed.Add(1)
		c.log.Warn("txbox/consumer: dead-letter failed; the broker will redeliver", "handler", h.Name, "message_id", hd.msg.ID, "err", err)
	}
}

// awaitRetry waits hd's backoff, then hands it to a worker; if the consumer
// stops first, it releases hd to the broker (before the run loop releases
// the key's queued deliveries: drain waits for it).
func (c *Consumer[TTx]) awaitRetry(fetchCtx context.Context, g *keyGate, hd *heldDelivery) {
	defer g.waiting.Done()
	ok := c.waitHeld(fetchCtx, hd, hd.delay)
	g.unhold(hd)
	if !ok {
		c.release(hd.Delivery)
		g.settled()
		return
	}
	hd.msg.Deliveries++
	select {
	case g.ready <- hd:
	case <-fetchCtx.Done():
		c.release(hd.Delivery)
		g.settled()
	}
}

// waitHeld waits delay before an in-process retry, or until the gate sets
// hd aside, and returns false if ctx ended first. The delivery is
// unsettled meanwhile, so the keep-alive (Config.NoKeepAlive) goes on
// extending its ack deadline where the broker has one.
func (c *Consumer[TTx]) waitHeld(ctx context.Context, hd *heldDelivery, delay time.Duration) bool {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-hd.setAside:
		return true
	case <-ctx.Done():
		return false
	}
}

// deadLetterParked dead-letters a delivery of a parked key without running
// it.
func (c *Consumer[TTx]) deadLetterParked(h *handler[TTx], d txbox.Delivery, perr *KeyParkedError) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.dead.Add(1)
	c.keys.parkedDead.Add(1)
	msg := d.Message()
	c.log.Warn("txbox/consumer: dead-lettering a message of a parked key without running it",
		"handler", h.Name, "key", perr.Key, "message_id", msg.ID, "parked_by", perr.By)
	if err := d.DeadLetter(ctx, perr); err != nil {
		c.ackFailed.Add(1)
		c.log.Warn("txbox/consumer: dead-letter failed; the broker will redeliver", "handler", h.Name, "message_id", msg.ID, "err", err)
	}
}

// heldDelivery is a delivery of an Ordered handler as process sees it:
// Retry is recorded, not sent (processOrdered retries in process), unless
// the consumer is stopping; DeadLetter is sent and recorded. Message counts
// the in-process retries in Deliveries.
type heldDelivery struct {
	txbox.Delivery
	msg   txbox.Received
	key   string
	hard  context.Context // the handlers' context: its end is Stop's deadline
	retry bool
	delay time.Duration
	dead  error
	// counted: the last failure was the message's own (it counts toward
	// MaxDeliveries), err; since is when the message first ran, holding
	// its key.
	counted bool
	err     error
	since   time.Time
	// setAside is closed, and aside set, when the gate sets the waiting
	// retry aside (keyGate.watch).
	setAside chan struct{}
	aside    *KeyHeldError
}

// failed records how the message failed (see processWith).
func (hd *heldDelivery) failed(err error, counted bool) { hd.counted, hd.err = counted, err }

func (hd *heldDelivery) Message() txbox.Received { return hd.msg }

func (hd *heldDelivery) Retry(ctx context.Context, delay time.Duration) error {
	if hd.hard.Err() != nil { // Stop's deadline passed: release it
		return hd.Delivery.Retry(ctx, delay)
	}
	hd.retry, hd.delay = true, delay
	return nil
}

func (hd *heldDelivery) DeadLetter(ctx context.Context, cause error) error {
	hd.dead = cause
	return hd.Delivery.DeadLetter(ctx, cause)
}
