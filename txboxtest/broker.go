package txboxtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox"
)

// Defaults of BrokerConfig.
const (
	// DefaultDedupeWindow is JetStream's default duplicate window.
	DefaultDedupeWindow = 2 * time.Minute
	// DefaultMaxRetryDelay keeps a test from waiting out a production
	// backoff (the consumer's starts at a second).
	DefaultMaxRetryDelay = 10 * time.Millisecond
)

// ErrInactive is returned (wrapped) by the waits of this package when
// nothing happened for the inactivity timeout.
var ErrInactive = errors.New("txboxtest: no activity within the inactivity timeout")

// BrokerConfig configures a Broker. Zero fields take their defaults.
type BrokerConfig struct {
	// DedupeWindow is how long a published message id is remembered: a
	// message published again with that id within the window is
	// acknowledged and dropped, as JetStream does. Default:
	// DefaultDedupeWindow (2m); negative: no dedupe.
	DedupeWindow time.Duration
	// MaxRetryDelay caps the delay of a Retry: the message comes again
	// after the delay asked for or MaxRetryDelay, whichever is shorter (the
	// delay asked for is kept in the Settlement). Default:
	// DefaultMaxRetryDelay (10ms); negative: no cap.
	MaxRetryDelay time.Duration
	// PublishError, when set, is called for every message Publish is
	// given; a non-nil error becomes that message's error and the message
	// is neither kept nor routed. Wrap it with txbox.Reject for a refusal
	// (it costs the relay an attempt); a plain error is a transient
	// failure.
	PublishError func(m txbox.Message) error
	// DeadLetterError, when set, is called before a message is
	// dead-lettered; a non-nil error is returned by Delivery.DeadLetter,
	// which then leaves the message to come again instead of settling it
	// (a dead-letter queue that is full or gone). It runs with the Broker
	// locked and must not call it.
	DeadLetterError func(dl DeadLetter) error
	// InactivityTimeout bounds the Broker's waits (WaitPublished,
	// WaitIdle) and Deliver's: they fail when the broker saw no publish,
	// delivery or settlement for that long. Default:
	// DefaultInactivityTimeout (10s).
	InactivityTimeout time.Duration
}

// Broker is an in-memory broker: a txbox.Publisher and a txbox.Subscriber,
// for running the real relay and the real consumer in a unit test. It is
// safe for concurrent use. The zero value is not usable: call NewBroker.
//
// Bindings are named queues, made with Bind, each receiving the messages
// published, after it was made, to a topic matching one of its patterns.
// A pattern is a topic whose dot-separated tokens may be * (exactly one
// token) or, as the last token, > (one or more tokens), as NATS subjects:
// "order.*" matches "order.placed", "order.>" matches "order.placed.eu".
// Several subscriptions to one binding share its messages (a work queue);
// each binding gets its own copy of a message.
//
// Within a binding, messages are delivered in publish order, and a message
// with an ordering key only once every earlier message of its key was
// acknowledged or dead-lettered: per-key order holds even with many
// subscriptions and handlers running side by side. A retried message
// keeps its place, ahead of its key's later messages. Deliveries counts
// the deliveries to its binding. A message's headers that could carry an
// identity (txbox.IsReservedHeader) are not delivered: the id travels in
// its own field, as on every broker txbox ships for.
type Broker struct {
	cfg BrokerConfig

	mu        sync.Mutex
	wake      chan struct{} // closed and replaced at every event
	published []txbox.Message
	seen      map[string]time.Time // message id → when it was published
	dropped   int
	bindings  map[string]*queue
	dead      []DeadLetter
	settled   []Settlement
	nextItem  uint64
}

var (
	_ txbox.Publisher  = (*Broker)(nil)
	_ txbox.Subscriber = (*Broker)(nil)
)

// NewBroker returns an empty Broker, with no bindings.
func NewBroker(cfg BrokerConfig) *Broker {
	if cfg.DedupeWindow == 0 {
		cfg.DedupeWindow = DefaultDedupeWindow
	}
	if cfg.MaxRetryDelay == 0 {
		cfg.MaxRetryDelay = DefaultMaxRetryDelay
	}
	cfg.InactivityTimeout = inactivity(cfg.InactivityTimeout)
	return &Broker{cfg: cfg, wake: make(chan struct{}), seen: map[string]time.Time{}, bindings: map[string]*queue{}}
}

// DeadLetter is a message a subscriber dead-lettered.
type DeadLetter struct {
	Message    txbox.Message
	Binding    string
	Deliveries int   // the delivery that was dead-lettered: 1 for the first
	Cause      error // as given to Delivery.DeadLetter
	At         time.Time
}

// Settlement is how a subscriber settled one delivery.
type Settlement struct {
	Binding    string
	Message    txbox.Message
	Outcome    Outcome // Acked, Retried or DeadLettered: a broker cannot tell a duplicate
	Deliveries int
	Delay      time.Duration // Retried: the delay asked for, before MaxRetryDelay
	Cause      error         // DeadLettered: the cause
	item       uint64
}

type queue struct {
	name     string
	patterns []string
	items    []*item // unsettled messages, in arrival order
}

type item struct {
	n          uint64
	msg        txbox.Message
	deliveries int
	out        *delivery // the delivery in flight, or nil
	readyAt    time.Time
}

// notify wakes every waiter; b.mu is held.
func (b *Broker) notify() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// Bind makes binding, or adds patterns to it: from now on it receives
// every message published to a topic matching one of them.
func (b *Broker) Bind(binding string, patterns ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.bindings[binding]
	if q == nil {
		q = &queue{name: binding}
		b.bindings[binding] = q
	}
	q.patterns = append(q.patterns, patterns...)
}

// match reports whether topic matches pattern (see Broker).
func match(pattern, topic string) bool {
	ps, ts := strings.Split(pattern, "."), strings.Split(topic, ".")
	for i, p := range ps {
		if p == ">" && i == len(ps)-1 {
			return len(ts) > i
		}
		if i >= len(ts) || (p != "*" && p != ts[i]) {
			return false
		}
	}
	return len(ps) == len(ts)
}

// Publish keeps and routes each message, or drops it as a duplicate of an
// id published within the dedupe window (acknowledging it either way);
// PublishError may fail some. See txbox.Publisher.
func (b *Broker) Publish(ctx context.Context, msgs []txbox.Message) []error {
	var errs []error
	setErr := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	ok := make([]bool, len(msgs))
	for i, m := range msgs {
		switch {
		case ctx.Err() != nil:
			setErr(i, ctx.Err())
		case b.cfg.PublishError != nil:
			if err := b.cfg.PublishError(m); err != nil {
				setErr(i, err)
				continue
			}
			ok[i] = true
		default:
			ok[i] = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for i, m := range msgs {
		if !ok[i] {
			continue
		}
		if b.cfg.DedupeWindow > 0 && m.ID != "" {
			if at, dup := b.seen[m.ID]; dup && now.Sub(at) < b.cfg.DedupeWindow {
				b.dropped++
				continue
			}
			b.seen[m.ID] = now
		}
		m = clone(m)
		b.published = append(b.published, m)
		for _, q := range b.bindings {
			for _, p := range q.patterns {
				if match(p, m.Topic) {
					b.enqueue(q, m)
					break
				}
			}
		}
	}
	b.notify()
	return errs
}

// enqueue appends m to q; b.mu is held.
func (b *Broker) enqueue(q *queue, m txbox.Message) *item {
	b.nextItem++
	d := clone(m)
	for k := range d.Headers {
		if txbox.IsReservedHeader(k) {
			delete(d.Headers, k)
		}
	}
	it := &item{n: b.nextItem, msg: d}
	q.items = append(q.items, it)
	return it
}

func clone(m txbox.Message) txbox.Message {
	m.Payload = slices.Clone(m.Payload)
	m.Headers = maps.Clone(m.Headers)
	return m
}

// Published returns the messages published to topic ("" for every topic)
// and kept, in publish order: duplicates the broker dropped and messages
// PublishError failed are not there.
func (b *Broker) Published(topic string) []txbox.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []txbox.Message
	for _, m := range b.published {
		if topic == "" || m.Topic == topic {
			out = append(out, clone(m))
		}
	}
	return out
}

// Dropped returns how many published messages were dropped as duplicates.
func (b *Broker) Dropped() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// DeadLetters returns the dead letters of every binding, oldest first.
func (b *Broker) DeadLetters() []DeadLetter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.dead)
}

// Settlements returns every settlement of every binding, in the order
// they happened.
func (b *Broker) Settlements() []Settlement {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.settled)
}

// WaitPublished waits until at least n messages of topic ("" for every
// topic) were published and kept, and returns them all (see Published).
// It fails with ErrInactive when the broker saw nothing happen for its
// InactivityTimeout, or with ctx's error.
func (b *Broker) WaitPublished(ctx context.Context, topic string, n int) ([]txbox.Message, error) {
	count := func() int {
		c := 0
		for _, m := range b.published {
			if topic == "" || m.Topic == topic {
				c++
			}
		}
		return c
	}
	if err := b.wait(ctx, func() bool { return count() >= n }); err != nil {
		return b.Published(topic), fmt.Errorf("wait for %d messages of %q (%d so far): %w", n, topic, len(b.Published(topic)), err)
	}
	return b.Published(topic), nil
}

// WaitIdle waits until no binding holds a message: every message routed
// was acknowledged or dead-lettered. It fails as WaitPublished does.
func (b *Broker) WaitIdle(ctx context.Context) error {
	err := b.wait(ctx, func() bool {
		for _, q := range b.bindings {
			if len(q.items) > 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		b.mu.Lock()
		var busy []string
		for name, q := range b.bindings {
			if len(q.items) > 0 {
				busy = append(busy, fmt.Sprintf("%s holds %d", name, len(q.items)))
			}
		}
		b.mu.Unlock()
		slices.Sort(busy)
		return fmt.Errorf("wait until idle (%s): %w", strings.Join(busy, ", "), err)
	}
	return nil
}

// wait waits until cond, run with b.mu held, is true; each event of the
// broker restarts the inactivity timeout.
func (b *Broker) wait(ctx context.Context, cond func() bool) error {
	timer := time.NewTimer(b.cfg.InactivityTimeout)
	defer timer.Stop()
	for {
		b.mu.Lock()
		ok, wake := cond(), b.wake
		b.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-wake:
			timer.Reset(b.cfg.InactivityTimeout)
		case <-timer.C:
			return fmt.Errorf("%w (%s)", ErrInactive, b.cfg.InactivityTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// CheckBinding reports whether binding was made with Bind.
func (b *Broker) CheckBinding(_ context.Context, binding string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bindings[binding] == nil {
		return fmt.Errorf("txboxtest: no binding %q (make it with Broker.Bind)", binding)
	}
	return nil
}

// Subscribe opens binding; prefetch bounds the deliveries that Next hands
// out before they are settled (<= 0: no bound).
func (b *Broker) Subscribe(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	if err := b.CheckBinding(ctx, binding); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return &subscription{b: b, q: b.bindings[binding], prefetch: prefetch, out: map[*delivery]bool{}}, nil
}

var errClosed = errors.New("txboxtest: subscription closed")

type subscription struct {
	b        *Broker
	q        *queue
	prefetch int
	out      map[*delivery]bool // handed out, not settled
	closed   bool
}

// Next returns the first deliverable message of the binding (see Broker).
func (s *subscription) Next(ctx context.Context) (txbox.Delivery, error) {
	b := s.b
	for {
		b.mu.Lock()
		if s.closed {
			b.mu.Unlock()
			return nil, errClosed
		}
		var it *item
		var soonest time.Time
		if s.prefetch <= 0 || len(s.out) < s.prefetch {
			it, soonest = s.q.next(time.Now())
		}
		if it != nil {
			it.deliveries++
			d := &delivery{s: s, it: it, rec: txbox.Received{Message: clone(it.msg), Deliveries: it.deliveries, Binding: s.q.name}}
			it.out = d
			s.out[d] = true
			b.notify()
			b.mu.Unlock()
			return d, nil
		}
		wake := b.wake
		b.mu.Unlock()
		var due <-chan time.Time
		var t *time.Timer
		if !soonest.IsZero() {
			t = time.NewTimer(time.Until(soonest))
			due = t.C
		}
		select {
		case <-wake:
		case <-due:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// next returns the first deliverable item, or nil and the time the first
// item held back by a retry delay becomes due (zero if none); b.mu is held.
func (q *queue) next(now time.Time) (*item, time.Time) {
	var soonest time.Time
	blocked := map[string]bool{} // keys with an earlier unsettled message
	for _, it := range q.items {
		k := it.msg.Key
		if k != "" {
			if blocked[k] {
				continue
			}
			blocked[k] = true
		}
		if it.out != nil {
			continue
		}
		if it.readyAt.After(now) {
			if soonest.IsZero() || it.readyAt.Before(soonest) {
				soonest = it.readyAt
			}
			continue
		}
		return it, time.Time{}
	}
	return nil, soonest
}

// Close releases the deliveries handed out and not settled: they come
// again, counted as a new delivery.
func (s *subscription) Close(context.Context) error {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s.closed = true
	for d := range s.out {
		d.done = true
		d.it.out = nil
	}
	clear(s.out)
	b.notify()
	return nil
}

type delivery struct {
	s    *subscription
	it   *item
	rec  txbox.Received
	done bool
}

func (d *delivery) Message() txbox.Received { return d.rec }

func (d *delivery) Ack(context.Context) error {
	return d.settle(Settlement{Outcome: Acked})
}

func (d *delivery) Retry(_ context.Context, delay time.Duration) error {
	return d.settle(Settlement{Outcome: Retried, Delay: delay})
}

func (d *delivery) DeadLetter(_ context.Context, cause error) error {
	return d.settle(Settlement{Outcome: DeadLettered, Cause: cause})
}

func (d *delivery) settle(st Settlement) error {
	b := d.s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if d.done {
		return fmt.Errorf("txboxtest: delivery %d of %s was already settled or released", d.rec.Deliveries, d.rec.ID)
	}
	d.done = true
	delete(d.s.out, d)
	it, q := d.it, d.s.q
	it.out = nil
	st.Binding, st.Message, st.Deliveries, st.item = q.name, clone(it.msg), d.rec.Deliveries, it.n
	if st.Outcome == DeadLettered && b.cfg.DeadLetterError != nil {
		dl := DeadLetter{Message: st.Message, Binding: q.name, Deliveries: st.Deliveries, Cause: st.Cause, At: time.Now()}
		if err := b.cfg.DeadLetterError(dl); err != nil {
			b.notify() // released: it comes again
			return fmt.Errorf("txboxtest: dead letter of %s not stored: %w", it.msg.ID, err)
		}
	}
	switch st.Outcome {
	case Retried:
		delay := st.Delay
		if b.cfg.MaxRetryDelay > 0 {
			delay = min(delay, b.cfg.MaxRetryDelay)
		}
		it.readyAt = time.Now().Add(delay)
	case DeadLettered:
		b.dead = append(b.dead, DeadLetter{Message: st.Message, Binding: q.name, Deliveries: st.Deliveries, Cause: st.Cause, At: time.Now()})
		fallthrough
	default:
		q.items = slices.DeleteFunc(q.items, func(x *item) bool { return x == it })
	}
	b.settled = append(b.settled, st)
	b.notify()
	return nil
}
