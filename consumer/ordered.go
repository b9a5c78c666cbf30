package consumer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox"
)

// DeadKeyPolicy is what an Ordered handler does with a key after one of its
// messages was dead-lettered.
type DeadKeyPolicy int

// The dead-key policies.
const (
	// ParkKey (the default) parks the key: its later messages are not run
	// but dead-lettered, in arrival order, with a *KeyParkedError, until
	// ReleaseKey; every other key keeps flowing.
	ParkKey DeadKeyPolicy = iota
	// ContinueKey goes on with the key's next message.
	ContinueKey
)

func (p DeadKeyPolicy) String() string {
	switch p {
	case ParkKey:
		return "park"
	case ContinueKey:
		return "continue"
	}
	return fmt.Sprintf("DeadKeyPolicy(%d)", int(p))
}

var (
	// ErrKeyParked is matched by *KeyParkedError, the cause a parked key's
	// later messages are dead-lettered with.
	ErrKeyParked = errors.New("txbox/consumer: key parked")
	// ErrNotParked: ReleaseKey was asked for a key that is not parked.
	ErrNotParked = errors.New("txbox/consumer: key not parked")
)

// KeyParkedError is the cause of the dead letter of a message whose key was
// parked (see ParkKey) when it arrived: it was not run.
type KeyParkedError struct {
	Handler, Key string
	// By is the id of the dead-lettered message that parked the key.
	By string
}

func (e *KeyParkedError) Error() string {
	return fmt.Sprintf("not run: key %q of handler %q is parked behind dead-lettered message %q (release it with Consumer.ReleaseKey)", e.Key, e.Handler, e.By)
}

// Is makes errors.Is match ErrKeyParked.
func (e *KeyParkedError) Is(target error) bool { return target == ErrKeyParked }

// ErrKeyHeld is matched by *KeyHeldError.
var ErrKeyHeld = errors.New("txbox/consumer: key set aside: its failing message held the consumer's window")

// KeyHeldError is the cause of the dead letter of an Ordered handler's
// message that failed (each failure retried in process) after holding its
// key for keyHoldLimit (5 s) while the deliveries the consumer held
// unsettled filled its window (the prefetch), so that no other key got a
// delivery, for keyHoldLimit:
// the message is dead-lettered before its MaxDeliveries so that the other
// keys go on, and its key then follows DeadKey (parked by default: its
// later messages are dead-lettered behind it, in order). Err is the
// message's last failure.
type KeyHeldError struct {
	Handler, Key string
	// Held is how long the message had held its key (since it first ran);
	// Queued how many of the key's later deliveries were queued behind it;
	// Window the binding's prefetch.
	Held           time.Duration
	Queued, Window int
	Err            error
}

func (e *KeyHeldError) Error() string {
	return fmt.Sprintf("set aside: this message of key %q of handler %q held its key, failing, for %s while the consumer's window of %d unsettled deliveries was full (%d of the key's later deliveries queued behind it) and no other key could get a delivery; last failure: %v",
		e.Key, e.Handler, e.Held, e.Window, e.Queued, e.Err)
}

// Is makes errors.Is match ErrKeyHeld.
func (e *KeyHeldError) Is(target error) bool { return target == ErrKeyHeld }

// Unwrap returns the message's last failure.
func (e *KeyHeldError) Unwrap() error { return e.Err }

// ParkedKey is a key an Ordered handler parked.
type ParkedKey struct {
	Handler string
	Key     string
	// MessageID is the dead-lettered message that parked the key; Cause is
	// why it was dead-lettered.
	MessageID string
	Cause     string
	Since     time.Time
	// DeadLettered counts the key's later messages dead-lettered (not run)
	// with a *KeyParkedError since it was parked.
	DeadLettered int
}

// OrderedSubscriber is an optional capability of a Subscriber: it opens a
// binding for an Ordered handler so that messages left unacknowledged by an
// earlier subscriber (a killed process) are delivered again before any
// later message. The consumer uses it, when the broker has it, for the
// bindings of Ordered handlers (natsjs has it; RabbitMQ queues and Kafka
// partitions redeliver in order by themselves).
type OrderedSubscriber interface {
	SubscribeOrdered(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error)
}

// subscribe opens b's binding, through OrderedSubscriber for an Ordered
// handler when the broker has it.
func (c *Consumer[TTx]) subscribe(ctx context.Context, b *binding[TTx], prefetch int) (txbox.Subscription, error) {
	if os, ok := c.cfg.Broker.(OrderedSubscriber); ok && b.ordered() {
		return os.SubscribeOrdered(ctx, b.name, prefetch)
	}
	return c.cfg.Broker.Subscribe(ctx, b.name, prefetch)
}

// ordered reports whether b is the binding of an Ordered handler (which
// Validate requires to be its binding's only route).
func (b *binding[TTx]) ordered() bool { return b.single != nil && b.single.Ordered }

// checkOrderedRoutes reports the Ordered handlers that share their binding
// with other routes or have a Route: an Ordered handler's key gate orders
// its binding's whole stream, so the binding must be its alone.
func checkOrderedRoutes[TTx any](hs []*handler[TTx]) []string {
	per := map[string]int{}
	for _, h := range hs {
		per[h.Binding]++
	}
	var out []string
	for _, h := range hs {
		if !h.Ordered {
			continue
		}
		if per[h.Binding] > 1 {
			out = append(out, fmt.Sprintf("handler %q is Ordered but shares binding %q with other handlers: an Ordered handler needs its binding to itself", h.Name, h.Binding))
		} else if !h.route.IsZero() {
			out = append(out, fmt.Sprintf("handler %q is Ordered and has a Route: an Ordered handler takes its whole binding (no Route)", h.Name))
		}
	}
	return out
}

// checkOrdered reports what is wrong with h's ordering settings, or "".
func checkOrdered(h HandlerConfig) string {
	if h.DeadKey != ParkKey && h.DeadKey != ContinueKey {
		return fmt.Sprintf("has an unknown DeadKey policy %d", int(h.DeadKey))
	}
	if h.DeadKey != ParkKey && !h.Ordered {
		return "sets DeadKey but is not Ordered"
	}
	return ""
}

// keyRegistry holds the key gates of a Consumer's Ordered handlers.
type keyRegistry struct {
	mu         sync.Mutex
	gates      map[string]*keyGate // by handler name
	parkedDead atomic.Int64
}

func (r *keyRegistry) open(handler string, limit int) *keyGate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gates == nil {
		r.gates = map[string]*keyGate{}
	}
	g := &keyGate{handler: handler, lanes: map[string]*lane{}, parked: map[string]*ParkedKey{},
		held: map[string]*heldDelivery{}, limit: max(limit, 1), admitted: time.Now(),
		slots: make(chan struct{}, max(limit, 1)), ready: make(chan *heldDelivery)}
	r.gates[handler] = g
	return g
}

func (r *keyRegistry) list() []*keyGate {
	r.mu.Lock()
	defer r.mu.Unlock()
	gs := make([]*keyGate, 0, len(r.gates))
	for _, g := range r.gates {
		gs = append(gs, g)
	}
	return gs
}

// ParkedKeys lists the keys the Ordered handlers have parked, by handler
// and key. Parking is kept in memory: a restarted consumer starts with none.
func (c *Consumer[TTx]) ParkedKeys() []ParkedKey {
	var out []ParkedKey
	for _, g := range c.keys.list() {
		out = append(out, g.parkedKeys()...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Handler != out[j].Handler {
			return out[i].Handler < out[j].Handler
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// ReleaseKey unparks key of the Ordered handler named handler: the key's
// next message to arrive runs. The messages dead-lettered while it was
// parked stay in the dead letters (redrive them, in order, if they should
// run). It returns an error matching ErrNotParked if the key is not parked.
func (c *Consumer[TTx]) ReleaseKey(handler, key string) error {
	for _, g := range c.keys.list() {
		if g.handler == handler && g.release(key) {
			c.log.Info("txbox/consumer: key released", "handler", handler, "key", key)
			return nil
		}
	}
	return fmt.Errorf("%w: handler %q, key %q", ErrNotParked, handler, key)
}

// keyGate sits between an Ordered handler's fetch loop and its workers: it
// lets one delivery per key run at a time and queues the key's later ones,
// in arrival order, until it is done. Unkeyed deliveries pass freely. The
// queued deliveries are bounded by slots (the prefetch): a fetch loop
// that finds them full waits.
//
// The deliveries the consumer holds unsettled (running, queued, waiting
// for a retry) are its window: the broker hands out no more than the
// prefetch (JetStream's MaxAckPending, RabbitMQ's QoS), and the fetch loop
// queues no more than slots. A key whose head keeps failing holds its
// share of the window until the head succeeds or is dead-lettered; its
// later deliveries, queued behind it, can fill the rest, and then no key
// gets a new delivery. So when the window has been full with nothing
// admitted for keyHoldLimit, the gate sets aside the key whose failing
// head has waited longest (setAside): see watch.
type keyGate struct {
	handler string
	mu      sync.Mutex
	lanes   map[string]*lane // keys with a delivery in a worker
	parked  map[string]*ParkedKey
	held    map[string]*heldDelivery // failing heads waiting for a retry, by key
	limit   int                      // the window: the binding's prefetch
	// unsettled counts the deliveries admitted and not yet settled;
	// admitted is when the fetch loop last handed one over.
	unsettled int
	admitted  time.Time
	// succeeded is when a delivery last ran and was acknowledged: a
	// failing key is set aside beside others only if something succeeded
	// since it began failing (see setAsideDue).
	succeeded time.Time
	slots     chan struct{}
	ready     chan *heldDelivery // retries whose backoff passed, for a worker
	waiting   sync.WaitGroup     // retries waiting for their backoff
}

// lane is a busy key's queue of waiting deliveries.
type lane struct{ queue []txbox.Delivery }

// admit reports whether d may go to a worker now; if not, it was queued
// behind its key, and the worker running the key will take it. If ctx ends
// while the queue is full (the consumer is stopping) it queues d beyond the
// bound, so that drain releases it after the key's earlier deliveries, and
// returns ctx's error.
func (g *keyGate) admit(ctx context.Context, d txbox.Delivery, key string) (bool, error) {
	g.mu.Lock()
	g.unsettled++
	g.admitted = time.Now()
	if key == "" {
		g.mu.Unlock()
		return true, nil
	}
	if g.lanes[key] == nil {
		g.lanes[key] = &lane{}
		g.mu.Unlock()
		return true, nil
	}
	g.mu.Unlock()
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		if l := g.lanes[key]; l != nil {
			l.queue = append(l.queue, d)
			return false, ctx.Err()
		}
		return true, ctx.Err() // nothing of its key queued: the caller releases it
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.lanes[key]
	if l == nil { // the key went idle while we waited for room
		<-g.slots
		g.lanes[key] = &lane{}
		return true, nil
	}
	l.queue = append(l.queue, d)
	g.admitted = time.Now()
	return false, nil
}

// settled notes that an admitted delivery was settled (acknowledged,
// dead-lettered or released).
func (g *keyGate) settled() {
	g.mu.Lock()
	g.unsettled--
	g.mu.Unlock()
}

// success notes that a delivery ran and was acknowledged.
func (g *keyGate) success() {
	g.mu.Lock()
	g.succeeded = time.Now()
	g.mu.Unlock()
}

// hold registers hd, a key's head waiting for a retry after a failure of
// its own, as one watch may set aside; unhold removes it.
func (g *keyGate) hold(hd *heldDelivery) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[hd.key] = hd
}

func (g *keyGate) unhold(hd *heldDelivery) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[hd.key] == hd {
		delete(g.held, hd.key)
	}
}

// watch calls setAsideDue every tenth of limit until ctx ends.
func (g *keyGate) watch(ctx context.Context, limit time.Duration) {
	t := time.NewTicker(max(limit/10, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.setAsideDue(now, limit)
		}
	}
}

// setAsideDue sets aside, if the window has been full with nothing
// admitted for limit at now, the held head (see hold) with the most
// deliveries of its key queued behind it among those that have held their
// key for at least limit, the oldest first on a tie. When several keys'
// heads are failing, a head is a candidate only if some delivery succeeded
// after it first ran: failures shared by every key in the window (a
// downstream service down) are an outage, which setting keys aside would
// turn into dead letters without letting anything through; they get their
// MaxDeliveries as before. The head set aside: its retry wait ends
// at once and a worker dead-letters it with a *KeyHeldError
// (processOrdered), which parks its key (DeadKey) and so settles the key's
// queued deliveries too, freeing the window. It returns the head set
// aside, or nil.
func (g *keyGate) setAsideDue(now time.Time, limit time.Duration) *heldDelivery {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unsettled < g.limit || now.Sub(g.admitted) < limit {
		return nil
	}
	var pick *heldDelivery
	pickQueued := 0
	for k, hd := range g.held {
		if now.Sub(hd.since) < limit || (len(g.held) > 1 && !g.succeeded.After(hd.since)) {
			continue
		}
		q := 0
		if l := g.lanes[k]; l != nil {
			q = len(l.queue)
		}
		if pick == nil || q > pickQueued || (q == pickQueued && hd.since.Before(pick.since)) {
			pick, pickQueued = hd, q
		}
	}
	if pick == nil {
		return nil
	}
	delete(g.held, pick.key)
	pick.aside = &KeyHeldError{Handler: g.handler, Key: pick.key, Held: now.Sub(pick.since).Round(time.Millisecond), Queued: pickQueued, Window: g.limit, Err: pick.err}
	close(pick.setAside)
	g.admitted = now // the next one waits for the window to stay full again
	return pick
}

// next returns the key's next waiting delivery, or false, and then the key
// is idle.
func (g *keyGate) next(key string) (txbox.Delivery, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.lanes[key]
	if l == nil {
		return nil, false
	}
	if len(l.queue) == 0 {
		delete(g.lanes, key)
		return nil, false
	}
	d := l.queue[0]
	l.queue[0] = nil
	l.queue = l.queue[1:]
	select {
	case <-g.slots:
	default: // queued beyond the bound at Stop
	}
	return d, true
}

// drain waits until no retry is waiting (each released itself), then
// empties every queue, returning the deliveries in their keys' order.
func (g *keyGate) drain() []txbox.Delivery {
	g.waiting.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []txbox.Delivery
	for k, l := range g.lanes {
		out = append(out, l.queue...)
		delete(g.lanes, k)
	}
	for len(g.slots) > 0 {
		<-g.slots
	}
	g.unsettled = 0
	return out
}

// parkedBy returns the key's parking, or nil, counting d as one more
// message dead-lettered behind it.
func (g *keyGate) parkedBy(key string) *KeyParkedError {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.parked[key]
	if p == nil {
		return nil
	}
	p.DeadLettered++
	return &KeyParkedError{Handler: g.handler, Key: key, By: p.MessageID}
}

func (g *keyGate) park(key, id string, cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := ""
	if cause != nil {
		c = cause.Error()
	}
	g.parked[key] = &ParkedKey{Handler: g.handler, Key: key, MessageID: id, Cause: c, Since: time.Now()}
}

func (g *keyGate) release(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.parked[key] == nil {
		return false
	}
	delete(g.parked, key)
	return true
}

func (g *keyGate) parkedKeys() []ParkedKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]ParkedKey, 0, len(g.parked))
	for _, p := range g.parked {
		out = append(out, *p)
	}
	return out
}

func (g *keyGate) parkedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.parked)
}

func (r *keyRegistry) parkedCount() int64 {
	n := 0
	for _, g := range r.list() {
		n += g.parkedCount()
	}
	return int64(n)
}
