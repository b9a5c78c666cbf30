package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// Headers of a dead-lettered copy beside txbox.HeaderError,
// txbox.HeaderDeliveries, txbox.HeaderBinding (STREAM/durable) and
// txbox.HeaderMessageID (the original id; the copy's Nats-Msg-Id is
// DeadLetterID).
const (
	HeaderSubject   = "Txbox-Subject"    // the subject it was published to
	HeaderStreamSeq = "Txbox-Stream-Seq" // its sequence in the stream
)

// DefaultDeadLetterPrefix is SubscriberConfig.DeadLetterPrefix's default.
const DefaultDeadLetterPrefix = "txbox.dlq."

// ConsumerConfig is what EnsureConsumer creates: a durable pull consumer
// with explicit acks.
type ConsumerConfig struct {
	Durable        string   // required
	FilterSubjects []string // default: the whole stream
	// AckWait is how long the server waits for an ack before redelivering.
	// A subscription keeps the messages it holds alive (its lease,
	// SubscriberConfig.Lease, by default a quarter of the AckWait; without
	// one, the consumer's InProgress, see consumer.Config.NoKeepAlive), so
	// it need not exceed the longest handler run; without a lease, it is
	// how long the messages a killed consumer held wait before they are
	// redelivered. Default: DefaultAckWait (10s).
	AckWait time.Duration
	// MaxAckPending bounds unacknowledged messages across all subscribers
	// of the consumer. Default: 1000.
	MaxAckPending int
}

// EnsureConsumer creates or updates the durable consumer cfg.Durable on
// stream; the stream must exist. Redelivery limits are left to the
// txbox consumer (its MaxDeliveries), which dead-letters with the error.
func EnsureConsumer(ctx context.Context, nc *nats.Conn, stream string, cfg ConsumerConfig) (jetstream.Consumer, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = 1000
	}
	cc := jetstream.ConsumerConfig{
		Durable: cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: cfg.AckWait, MaxAckPending: cfg.MaxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if len(cfg.FilterSubjects) == 1 {
		cc.FilterSubject = cfg.FilterSubjects[0] // servers before 2.10 know only this field
	} else {
		cc.FilterSubjects = cfg.FilterSubjects
	}
	c, err := js.CreateOrUpdateConsumer(ctx, stream, cc)
	if err != nil {
		return nil, fmt.Errorf("natsjs: create consumer %s/%s: %w", stream, cfg.Durable, err)
	}
	return c, nil
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// DeadLetterPrefix: a binding's dead letters are published to
	// DeadLetterPrefix + STREAM + "." + durable, which a stream must
	// capture (CheckBinding verifies it). Default: DefaultDeadLetterPrefix
	// ("txbox.dlq.").
	DeadLetterPrefix string
	// AckWait, when set, is the AckWait Subscribe gives each durable it
	// opens whose AckWait differs (the durable is updated on the server):
	// how long the messages of a killed consumer wait before they are
	// redelivered. Default: 0, the durable's AckWait is left as it is.
	AckWait time.Duration
	// Lease is how long the messages a subscription holds — pulled and
	// queued, or handed to the consumer and not settled — wait for
	// redelivery once its process is gone (SIGKILL, OOM, a lost host),
	// instead of the durable's AckWait: the subscription gives each
	// message that deadline when it arrives (a NAK with the lease as its
	// delay: the server keeps the message pending for the subscription,
	// whose ACK settles it as usual, and redelivers it once the delay has
	// passed) and renews it every third of the lease until the message is
	// settled. The cost: one NAK per message received and one per held
	// message every third of the lease; a process stalled for two thirds
	// of it (a GC pause, an overloaded machine) has its messages
	// redelivered under it (duplicates, which the inbox absorbs). Default:
	// a quarter of the durable's AckWait, at least 1s; negative, or not
	// shorter than the AckWait: none (InProgress keeps the messages, and a
	// dead process's wait the AckWait). SubscribeOrdered never leases.
	Lease time.Duration
}

// Binding returns the binding of the durable consumer durable on stream,
// for consumer.HandlerConfig.Binding: "STREAM/durable".
func Binding(stream, durable string) string { return stream + "/" + durable }

// ParseBinding splits a binding made by Binding.
func ParseBinding(b string) (stream, durable string, err error) {
	stream, durable, ok := strings.Cut(b, "/")
	if !ok || stream == "" || durable == "" || strings.Contains(durable, "/") {
		return "", "", fmt.Errorf("natsjs: binding %q is not STREAM/durable (build it with natsjs.Binding)", b)
	}
	return stream, durable, nil
}

// Subscriber implements txbox.Subscriber on JetStream. A binding is a
// durable pull consumer with explicit acks on a stream (see Binding and
// EnsureConsumer).
type Subscriber struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	dlq     string
	ackWait time.Duration
	lease   time.Duration // SubscriberConfig.Lease
}

var _ txbox.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber over nc, a connection the caller
// made; whoever created it closes it. Give it nats.MaxReconnects(-1) so
// that it rides out a server restart.
func NewSubscriber(nc *nats.Conn, cfg SubscriberConfig) (*Subscriber, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: natsjs: nil connection", txbox.ErrInvalidConfig)
	}
	if cfg.DeadLetterPrefix == "" {
		cfg.DeadLetterPrefix = DefaultDeadLetterPrefix
	}
	if cfg.AckWait < 0 {
		return nil, fmt.Errorf("%w: natsjs: negative AckWait", txbox.ErrInvalidConfig)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsjs: %w", err)
	}
	return &Subscriber{nc: nc, js: js, dlq: cfg.DeadLetterPrefix, ackWait: cfg.AckWait, lease: cfg.Lease}, nil
}

// DeadLetterID is the Nats-Msg-Id of the dead letter of message id from
// binding: "dead:" + binding + ":" + id, one per message and binding.
func DeadLetterID(binding, id string) string { return "dead:" + binding + ":" + id }

// DeadLetterSubject is where the dead letters of binding go.
func (s *Subscriber) DeadLetterSubject(binding string) string {
	return s.dlq + strings.ReplaceAll(binding, "/", ".")
}

// CheckBinding checks that the stream and its durable consumer exist, that
// the consumer is a pull consumer with explicit acks, and that a stream
// captures the binding's dead-letter subject.
func (s *Subscriber) CheckBinding(ctx context.Context, binding string) error {
	stream, durable, err := ParseBinding(binding)
	if err != nil {
		return err
	}
	var problems []string
	c, err := s.js.Consumer(ctx, stream, durable)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		problems = append(problems, fmt.Sprintf("stream %s does not exist", stream))
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		problems = append(problems, fmt.Sprintf("durable consumer %s does not exist on stream %s (create it with natsjs.EnsureConsumer)", durable, stream))
	case err != nil:
		problems = append(problems, fmt.Sprintf("look up consumer: %v", err))
	default:
		ci := c.CachedInfo()
		if ci.Config.DeliverSubject != "" {
			problems = append(problems, fmt.Sprintf("consumer %s is a push consumer; a pull consumer is needed", durable))
		}
		if ci.Config.AckPolicy != jetstream.AckExplicitPolicy {
			problems = append(problems, fmt.Sprintf("consumer %s has ack policy %s; explicit is needed", durable, ci.Config.AckPolicy))
		}
	}
	dl := s.DeadLetterSubject(binding)
	if _, err := s.js.StreamNameBySubject(ctx, dl); err != nil {
		problems = append(problems, fmt.Sprintf("no stream captures the dead-letter subject %s: %v", dl, err))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Subscribe starts pulling from binding, at most prefetch messages ahead.
func (s *Subscriber) Subscribe(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	stream, durable, err := ParseBinding(binding)
	if err != nil {
		return nil, err
	}
	c, err := s.js.Consumer(ctx, stream, durable)
	if err != nil {
		return nil, fmt.Errorf("natsjs: consumer %s: %w", binding, err)
	}
	if c, err = s.tuneAckWait(ctx, stream, c); err != nil {
		return nil, err
	}
	sub := &subscription{s: s, binding: binding, stream: stream, durable: durable, prefetch: max(prefetch, 1), cons: c}
	sub.open()
	return sub, nil
}

type subscription struct {
	s               *Subscriber
	binding         string
	stream, durable string
	prefetch        int
	mu              sync.Mutex
	cons            jetstream.Consumer
	pull            *puller       // nil until opened: an ordered subscription opens after its hold
	ackWait         time.Duration // the durable's, when it was opened
	lease           *leaser       // set when opened, unless ordered or off (SubscriberConfig.Lease)
	closed          bool
	holdUntil       time.Time       // SubscribeOrdered: pull nothing before (ordered.go)
	ordered         bool            // SubscribeOrdered: release with releaseDelay
	pending         int             // SubscribeOrdered: messages pending at the start, gathered after the hold
	gathered        []jetstream.Msg // those, in stream order, handed out before anything else
}

// open starts pulling (see puller); nil once the subscription is closed.
func (sub *subscription) open() *puller {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.closed {
		return nil
	}
	if sub.pull == nil {
		sub.ackWait = sub.cons.CachedInfo().Config.AckWait
		lookup := func(ctx context.Context) (jetstream.Consumer, error) {
			return sub.s.js.Consumer(ctx, sub.stream, sub.durable)
		}
		if lease := leaseFor(sub.s.lease, sub.ackWait); lease > 0 && !sub.ordered {
			sub.lease = newLeaser(sub.s.nc, lease)
		}
		sub.pull = newPuller(sub.s.nc, sub.cons, lookup, sub.prefetch, sub.ackWait, sub.lease)
	}
	return sub.pull
}

// Next returns the next message. The pulls ride out a reconnect; a pull
// that fails (the durable was deleted and re-created, the connection went
// silent) is reported here, and pulling goes on after a backoff.
func (sub *subscription) Next(ctx context.Context) (txbox.Delivery, error) {
	sub.mu.Lock()
	p, closed := sub.pull, sub.closed
	sub.mu.Unlock()
	if closed {
		return nil, errPullerClosed
	}
	if p == nil {
		if err := sub.hold(ctx); err != nil {
			return nil, err
		}
		if p = sub.open(); p == nil {
			return nil, errPullerClosed
		}
		if err := sub.gather(ctx, p); err != nil {
			return nil, err
		}
	}
	for {
		m := sub.popGathered()
		if m == nil {
			var err error
			if m, err = p.next(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("natsjs: next from %s: %w", sub.binding, err)
			}
		}
		d := sub.deliver(m)
		if to := m.Headers().Get(HeaderRedriveFor); to != "" && to != sub.binding {
			_ = d.Ack(ctx) // a dead letter of another binding, redriven to it
			continue
		}
		return d, nil
	}
}

// deliver hands m out: a leased delivery keeps its lease until settled;
// without a lease, the delivery's deadline is the AckWait, which the
// consumer extends (txbox.DeadlineExtender).
func (sub *subscription) deliver(m jetstream.Msg) txbox.Delivery {
	sub.mu.Lock()
	ackWait, p, lease := sub.ackWait, sub.pull, sub.lease
	sub.mu.Unlock()
	if p != nil {
		p.handOut()
	}
	d := &delivery{m: m, sub: sub, pull: p, lease: lease}
	if lease != nil {
		return d
	}
	return &extendable{delivery: d, ackWait: ackWait}
}

// Close stops pulling and naks the messages pulled but not handed out, so
// that they are redelivered at once instead of after AckWait.
func (sub *subscription) Close(ctx context.Context) error {
	sub.mu.Lock()
	p, lease := sub.pull, sub.lease
	sub.pull, sub.closed = nil, true
	gathered := sub.gathered
	sub.gathered = nil
	sub.mu.Unlock()
	for _, m := range gathered {
		_ = sub.release(m)
	}
	if p != nil {
		for _, m := range p.close(ctx) {
			_ = sub.release(m)
		}
	}
	if lease != nil {
		lease.stop()
	}
	return nil
}

// unlease ends m's lease, if it has one, before m is settled.
func (sub *subscription) unlease(m jetstream.Msg) {
	sub.mu.Lock()
	lease := sub.lease
	sub.mu.Unlock()
	if lease != nil {
		lease.release(m)
	}
}

type delivery struct {
	m       jetstream.Msg
	sub     *subscription
	pull    *puller     // whose prefetch the delivery counts in, until settled
	lease   *leaser     // keeps it until settled; nil: see extendable
	settled atomic.Bool // Ack, Retry or DeadLetter was called
}

// unlease ends the delivery's lease: no renewal follows the settlement.
func (d *delivery) unlease() {
	if d.lease != nil {
		d.lease.release(d.m)
	}
}

// settle gives the delivery's room under the prefetch back, once.
func (d *delivery) settle() {
	if d.pull != nil && d.settled.CompareAndSwap(false, true) {
		d.pull.settled()
	}
}

// StreamSequence is the message's sequence in the stream: the order in
// which a key's messages were published (consumer.StreamSequencer).
func (d *delivery) StreamSequence() uint64 {
	if md, err := d.m.Metadata(); err == nil {
		return md.Sequence.Stream
	}
	return 0
}

func (d *delivery) numDelivered() int { return int(deliveries(d.m)) }

// Message returns the message: id = Nats-Msg-Id (Txbox-Message-Id on a
// redriven dead letter, whose Nats-Msg-Id starts with "redrive:"), topic =
// subject, key and
// created-at from Txbox-Key and Txbox-Created-At (taken out of the
// headers), each other header's first value but the Nats-* ones.
func (d *delivery) Message() txbox.Received {
	h := map[string]string{}
	for k, v := range d.m.Headers() {
		if len(v) > 0 && !strings.HasPrefix(strings.ToLower(k), "nats-") {
			h[k] = v[0]
		}
	}
	key, created := h[txbox.HeaderKey], wire.ParseTime(h[txbox.HeaderCreatedAt])
	id := d.m.Headers().Get(jetstream.MsgIDHeader)
	if orig := h[txbox.HeaderMessageID]; orig != "" && strings.HasPrefix(id, redriveIDPrefix) {
		id = orig // a redriven dead letter (DeadLetters.Redrive)
	}
	for _, k := range []string{txbox.HeaderKey, txbox.HeaderCreatedAt, txbox.HeaderMessageID, HeaderRedriveFor} {
		delete(h, k)
	}
	return txbox.Received{
		Message: txbox.Message{ID: id, Topic: d.m.Subject(), Key: key,
			Payload: d.m.Data(), Headers: h, CreatedAt: created},
		Deliveries: d.numDelivered(),
		Binding:    d.sub.binding,
	}
}

// Ack acks and waits for the server's confirmation.
func (d *delivery) Ack(ctx context.Context) error {
	defer d.settle()
	d.unlease()
	return d.m.DoubleAck(ctx)
}

// Retry naks with a delay: the server redelivers after it.
func (d *delivery) Retry(ctx context.Context, delay time.Duration) error {
	defer d.settle()
	if delay <= 0 {
		return d.sub.release(d.m)
	}
	d.unlease()
	return d.m.NakWithDelay(delay)
}

// DeadLetter publishes a copy (same payload and headers, plus the error,
// the delivery count, the binding, subject and stream sequence) to the
// binding's dead-letter subject, waits for the stream's ack, then
// terminates the original so it is never redelivered. If the copy is not
// stored, the original is nak'ed for a later try.
func (d *delivery) DeadLetter(ctx context.Context, cause error) error {
	defer d.settle()
	out := nats.NewMsg(d.sub.s.DeadLetterSubject(d.sub.binding))
	out.Data = d.m.Data()
	for k, v := range d.m.Headers() {
		out.Header[k] = v
	}
	msg := ""
	if cause != nil {
		msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(cause.Error())
		if len(msg) > 4096 {
			msg = msg[:4096]
		}
	}
	// The copy gets an id of its own, DeadLetterID: with the original's
	// Nats-Msg-Id, a stream that captures the dead-letter subject too would
	// drop the copy as a duplicate of the original, and without the binding
	// the dead letter of a second binding would be dropped as a duplicate of
	// the first one's. Within the dead letters' stream's duplicate window,
	// the stream drops a second dead letter of the message from the binding
	// (its consumer was killed between the publish and the Term, or two
	// consumers held it in turn).
	if id := d.m.Headers().Get(jetstream.MsgIDHeader); id != "" {
		out.Header.Set(txbox.HeaderMessageID, id)
		out.Header.Set(jetstream.MsgIDHeader, DeadLetterID(d.sub.binding, id))
	}
	out.Header.Set(txbox.HeaderError, msg)
	out.Header.Set(txbox.HeaderDeliveries, strconv.Itoa(d.numDelivered()))
	out.Header.Set(txbox.HeaderBinding, d.sub.binding)
	out.Header.Set(HeaderSubject, d.m.Subject())
	if md, err := d.m.Metadata(); err == nil {
		out.Header.Set(HeaderStreamSeq, strconv.FormatUint(md.Sequence.Stream, 10))
	}
	_, err := d.sub.s.js.PublishMsg(ctx, out)
	d.unlease() // kept until now: the copy may take a while
	if err != nil {
		_ = d.m.NakWithDelay(time.Second)
		return fmt.Errorf("natsjs: dead-letter to %s: %w", out.Subject, err)
	}
	return d.m.Term()
}
