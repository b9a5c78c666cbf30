package txboxrabbitmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// Names derived from a queue by DeclareQueue.
func retryQueue(q string) string   { return q + ".retry" }
func deadExchange(q string) string { return q + ".dlx" }
func deadQueue(q string) string    { return q + ".dlq" }

// QueueConfig is what DeclareQueue creates.
type QueueConfig struct {
	// Name of the queue. Required.
	Name string
	// Exchange, if set, is declared (durable, type "topic") and the queue is
	// bound to it with each of RoutingKeys. Default: "" (no binding: the
	// default exchange routes by queue name).
	Exchange    string
	RoutingKeys []string
	// Adopt uses a queue that already exists with arguments of its own
	// (declared by another tool, without txbox's x-dead-letter-exchange)
	// as it is, instead of failing with PRECONDITION_FAILED: DeclareQueue
	// declares the retry queue, the dead-letter exchange and queue and the
	// bindings around it and leaves its arguments alone. The Subscriber
	// works the same on an adopted queue (it publishes retries and dead
	// letters itself); only messages rejected by other means (a
	// queue-length limit, a policy, another client's basic.reject) do not
	// reach <name>.dlq. A queue that does not exist yet is declared with
	// txbox's arguments either way. Default: false.
	Adopt bool
}

// DeclareQueue declares (idempotently) a durable queue for a consumer
// binding, with <name>.retry (a queue with no consumer: a failed message
// waits there for its backoff, as a per-message TTL, then dead-letters back
// to <name>) and the dead-letter exchange <name>.dlx (direct) routing to
// <name>.dlq. The queue itself dead-letters to <name>.dlx, so that a
// message rejected by other means lands there too. It works on channels
// of its own on conn, closed when it returns.
//
// The queue is declared first, so that a queue that exists with other
// arguments fails the call before anything else is created; its error
// wraps ErrQueueArguments and says to set QueueConfig.Adopt.
func DeclareQueue(ctx context.Context, conn *Conn, cfg QueueConfig) error {
	if cfg.Name == "" {
		return fmt.Errorf("%w: rabbitmq: queue name is required", txbox.ErrInvalidConfig)
	}
	if err := CheckExchange(cfg.Exchange); err != nil {
		return fmt.Errorf("%w: rabbitmq: Exchange %w", txbox.ErrInvalidConfig, err)
	}
	if conn == nil {
		return fmt.Errorf("%w: rabbitmq: nil connection", txbox.ErrInvalidConfig)
	}
	q := cfg.Name
	if err := declareMain(conn, q, cfg.Adopt); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	steps := []func() error{
		func() error { return ch.ExchangeDeclare(deadExchange(q), "direct", true, false, false, false, nil) },
		func() error {
			_, err := ch.QueueDeclare(deadQueue(q), true, false, false, false, nil)
			return err
		},
		func() error { return ch.QueueBind(deadQueue(q), q, deadExchange(q), false, nil) },
		func() error {
			_, err := ch.QueueDeclare(retryQueue(q), true, false, false, false, amqp.Table{
				"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q})
			return err
		},
	}
	if cfg.Exchange != "" {
		steps = append(steps, func() error { return ch.ExchangeDeclare(cfg.Exchange, "topic", true, false, false, false, nil) })
		for _, k := range cfg.RoutingKeys {
			steps = append(steps, func() error { return ch.QueueBind(q, k, cfg.Exchange, false, nil) })
		}
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s(); err != nil {
			return fmt.Errorf("txboxrabbitmq: declare %s: %w", q, err)
		}
	}
	return nil
}

// ErrQueueArguments is wrapped by DeclareQueue's error when the queue
// exists with arguments other than txbox's (PRECONDITION_FAILED) and
// QueueConfig.Adopt is not set.
var ErrQueueArguments = errors.New("txboxrabbitmq: the queue exists with other arguments")

// declareMain declares queue q with txbox's arguments on a channel of its
// own (a refused declaration closes its channel). With adopt, a queue that
// exists with other arguments is taken as it is.
func declareMain(conn *Conn, q string, adopt bool) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-dead-letter-exchange": deadExchange(q)})
	var ae *amqp.Error
	if err == nil || !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		if err != nil {
			return fmt.Errorf("txboxrabbitmq: declare %s: %w", q, err)
		}
		return nil
	}
	if !adopt {
		return fmt.Errorf("%w: declare %s: %v (set QueueConfig.Adopt to use it as it is)", ErrQueueArguments, q, err)
	}
	pch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer pch.Close()
	if _, err := pch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
		return fmt.Errorf("txboxrabbitmq: adopt %s: %w", q, err)
	}
	return nil
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// ReconnectMax caps the doubling wait between attempts to reopen a
	// subscription's channels after they (or the connection) failed.
	// Default: 5s.
	ReconnectMax time.Duration
}

// Subscriber implements txbox.Subscriber on RabbitMQ. A binding is the
// name of a queue declared with DeclareQueue. Each subscription consumes
// on channels of its own on the Subscriber's Conn, reopened (the Conn
// redialling) after the broker or the network dropped them; messages
// unacknowledged on a lost channel are redelivered by the broker.
type Subscriber struct {
	conn *Conn
	cfg  SubscriberConfig
}

var _ txbox.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber over conn, a connection the caller
// made; whoever created it closes it. It opens no channel yet.
func NewSubscriber(conn *Conn, cfg SubscriberConfig) (*Subscriber, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: rabbitmq: nil connection", txbox.ErrInvalidConfig)
	}
	if cfg.ReconnectMax < 0 {
		return nil, fmt.Errorf("%w: rabbitmq: negative ReconnectMax", txbox.ErrInvalidConfig)
	}
	if cfg.ReconnectMax == 0 {
		cfg.ReconnectMax = 5 * time.Second
	}
	return &Subscriber{conn: conn, cfg: cfg}, nil
}

// CheckBinding checks that the queue, its retry queue and its dead-letter
// exchange exist (passive declarations).
func (s *Subscriber) CheckBinding(ctx context.Context, binding string) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("cannot connect to RabbitMQ: %w", err)
	}
	_ = ch.Close()
	var missing []string
	queueMissing := false
	check := func(what string, f func(ch *amqp.Channel) error) {
		ch, err := s.conn.Channel() // a failed passive declare closes its channel
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s: %v", what, err))
			return
		}
		defer ch.Close()
		if err := f(ch); err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				missing = append(missing, what+" does not exist")
				queueMissing = queueMissing || what == "queue "+binding
			} else {
				missing = append(missing, fmt.Sprintf("%s: %v", what, err))
			}
		}
	}
	for _, q := range []string{binding, retryQueue(binding)} {
		check("queue "+q, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			return err
		})
	}
	check("dead-letter exchange "+deadExchange(binding), func(ch *amqp.Channel) error {
		return ch.ExchangeDeclarePassive(deadExchange(binding), "direct", true, false, false, false, nil)
	})
	if len(missing) == 0 {
		return nil
	}
	advice := "declare it with txboxrabbitmq.DeclareQueue"
	if !queueMissing {
		// The queue exists, maybe declared by another tool with arguments
		// of its own: DeclareQueue without Adopt would fail on it.
		advice = fmt.Sprintf("declare them with txboxrabbitmq.DeclareQueue and QueueConfig{Name: %q, Adopt: true}, which leaves the existing queue's arguments as they are", binding)
	}
	return fmt.Errorf("%v (%s)", joinComma(missing), advice)
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// Subscribe starts consuming queue binding with manual acks and the
// given prefetch.
func (s *Subscriber) Subscribe(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	sub := &subscription{conn: s.conn, cfg: s.cfg, queue: binding, prefetch: max(prefetch, 1)}
	if err := sub.connect(); err != nil {
		return nil, err
	}
	return sub, nil
}

type subscription struct {
	conn     *Conn
	cfg      SubscriberConfig
	queue    string
	prefetch int

	mu         sync.Mutex
	st         *settler
	deliveries <-chan amqp.Delivery
	closed     bool
}

// settler settles the deliveries of one consuming channel. The channel is
// in transaction mode (tx.select), so that the copy a DeadLetter publishes
// and the ack of the original are committed together or not at all: a
// consumer killed at any point of a dead letter leaves either the original
// in the queue or its copy in the dead letters, never both. A commit
// covers all the channel's pending work, so transactions run one at a
// time; a basic.return on the channel belongs to the copy just committed.
// Acks and requeues that arrive while a transaction runs share the next
// one (see settle).
type settler struct {
	mu      sync.Mutex // held through a transaction
	ch      *amqp.Channel
	returns <-chan amqp.Return
	conn    *Conn // for the throwaway channels of deadQueueMissing

	qmu      sync.Mutex
	queued   []settleReq
	flushing bool
}

type settleReq struct {
	op   func() error // basic.ack or basic.nack of one delivery
	done chan error
}

// connect opens the consuming channel in transaction mode.
func (s *subscription) connect() error {
	ch, err := s.conn.Channel()
	if err != nil {
		return err
	}
	fail := func(what string, err error) error {
		_ = ch.Close()
		return fmt.Errorf("txboxrabbitmq: %s: %w", what, err)
	}
	if err := ch.Qos(s.prefetch, 0, false); err != nil {
		return fail("qos", err)
	}
	if err := ch.Tx(); err != nil {
		return fail("tx.select", err)
	}
	// The client's reader hands each return over before the commit-ok
	// that follows it; commit drains the channel so it never fills.
	returns := ch.NotifyReturn(make(chan amqp.Return, 64))
	ds, err := ch.Consume(s.queue, "", false, false, false, false, nil)
	if err != nil {
		return fail("consume "+s.queue, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = ch.Close()
		return errors.New("txboxrabbitmq: subscription closed")
	}
	s.st, s.deliveries = &settler{ch: ch, returns: returns, conn: s.conn}, ds
	return nil
}

// drop closes the consuming channel; the caller holds s.mu.
func (s *subscription) drop() error {
	var err error
	if s.st != nil {
		err = s.st.ch.Close()
	}
	s.st, s.deliveries = nil, nil
	return err
}

// Next returns the next delivery, reconnecting as long as it takes.
func (s *subscription) Next(ctx context.Context) (txbox.Delivery, error) {
	wait := 50 * time.Millisecond
	for {
		s.mu.Lock()
		ds, st := s.deliveries, s.st
		s.mu.Unlock()
		if ds != nil {
			select {
			case d, ok := <-ds:
				if ok {
					return &delivery{d: d, st: st, queue: s.queue}, nil
				}
				// The connection or channel is gone: unacked messages
				// return to the queue; reconnect.
				s.mu.Lock()
				if s.deliveries == ds {
					_ = s.drop()
				}
				s.mu.Unlock()
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if err := s.connect(); err == nil {
			wait = 50 * time.Millisecond
			continue
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		wait = min(2*wait, s.cfg.ReconnectMax)
	}
}

// Close closes the subscription's channel: RabbitMQ rolls back a
// transaction not committed and requeues every unacked message. The
// connection stays open.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if err := s.drop(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return err
	}
	return nil
}

type delivery struct {
	d     amqp.Delivery
	st    *settler
	queue string
}

// fromRetry reports whether the delivery is a copy txbox's Retry put in
// <queue>.retry, come back by its TTL: its x-death (set by the broker)
// names that queue, expired. Only then are its Txbox-Deliveries and
// Txbox-Topic txbox's own; on any other delivery they are a producer's
// and steer nothing.
func (d *delivery) fromRetry() bool {
	deaths, _ := d.d.Headers["x-death"].([]any)
	for _, x := range deaths {
		if t, ok := x.(amqp.Table); ok && t["queue"] == retryQueue(d.queue) && t["reason"] == "expired" {
			return true
		}
	}
	return false
}

func (d *delivery) deliveries() int {
	n := 0
	if d.fromRetry() {
		if s, ok := wire.String(d.d.Headers[txbox.HeaderDeliveries]); ok {
			n, _ = strconv.Atoi(s)
		}
	}
	// A header's count is capped so that the increments below cannot
	// overflow into a negative count, which no MaxDeliveries would reach.
	n = min(max(n, 0), math.MaxInt32) + 1
	if d.d.Redelivered {
		n++ // delivered before, unacked (a consumer died or released it)
	}
	return n
}

// Message returns the message (docs/reference/wire-format.md): id = message_id, topic
// = routing key (or, on a copy back from the retry queue, the Txbox-Topic
// it was first published with), key and created-at from Txbox-Key and
// Txbox-Created-At (else the timestamp property), content_type as the
// Content-Type header, and the other headers as text (see wire.String:
// tables, arrays and invalid UTF-8 are dropped). Txbox-Key,
// Txbox-Created-At, Txbox-Topic and Txbox-Deliveries are taken out of the
// headers.
func (d *delivery) Message() txbox.Received {
	h := map[string]string{}
	for k, v := range d.d.Headers {
		if s, ok := wire.String(v); ok {
			h[k] = s
		}
	}
	topic := d.d.RoutingKey
	if t, ok := h[txbox.HeaderTopic]; ok && d.fromRetry() {
		topic = t
	}
	created := wire.ParseTime(h[txbox.HeaderCreatedAt])
	if created.IsZero() && !d.d.Timestamp.IsZero() {
		created = d.d.Timestamp
	}
	key := h[txbox.HeaderKey]
	for _, k := range []string{txbox.HeaderTopic, txbox.HeaderDeliveries, txbox.HeaderKey, txbox.HeaderCreatedAt} {
		delete(h, k)
	}
	if d.d.ContentType != "" {
		h[txbox.HeaderContentType] = d.d.ContentType
	}
	return txbox.Received{
		Message:    txbox.Message{ID: d.d.MessageId, Topic: topic, Key: key, Payload: d.d.Body, Headers: h, CreatedAt: created},
		Deliveries: d.deliveries(),
		Binding:    d.queue,
	}
}

// Ack acks the message and commits (see settler.settle).
func (d *delivery) Ack(ctx context.Context) error {
	if err := d.st.settle(ctx, func() error { return d.d.Ack(false) }); err != nil {
		return fmt.Errorf("txboxrabbitmq: ack: %w", err)
	}
	return nil
}

// settle runs op (an ack or nack without a copy) in a transaction. The
// caller that finds none of these in flight commits its own op and, until
// none is left, every op queued meanwhile by the others, who wait for
// their answer: the consumer settles a committed batch's deliveries all at
// once, so a batch costs about two commits, not one per message.
func (st *settler) settle(ctx context.Context, op func() error) error {
	req := settleReq{op: op, done: make(chan error, 1)}
	st.qmu.Lock()
	st.queued = append(st.queued, req)
	if st.flushing {
		st.qmu.Unlock()
		select {
		case err := <-req.done:
			return err
		case <-ctx.Done():
			return ctx.Err() // the settlement may still be committed
		}
	}
	st.flushing = true
	st.qmu.Unlock()
	for {
		st.qmu.Lock()
		batch := st.queued
		st.queued = nil
		if len(batch) == 0 {
			st.flushing = false
			st.qmu.Unlock()
			break
		}
		st.qmu.Unlock()
		errs := make([]error, len(batch))
		st.mu.Lock()
		for i, r := range batch {
			errs[i] = r.op()
		}
		err := st.ch.TxCommit()
		st.mu.Unlock()
		for i, r := range batch {
			r.done <- cmp.Or(errs[i], err)
		}
	}
	return <-req.done
}

// copyOf is the message republished for a retry or a dead letter.
func (d *delivery) copyOf(exchange, key string, extra amqp.Table) *republished {
	h := amqp.Table{}
	for k, v := range d.d.Headers {
		if k != "x-death" {
			h[k] = v
		}
	}
	h[txbox.HeaderTopic] = d.Message().Topic // not a producer's Txbox-Topic
	for k, v := range extra {
		h[k] = v
	}
	return &republished{exchange: exchange, key: key, p: amqp.Publishing{
		Headers: h, DeliveryMode: amqp.Persistent, MessageId: d.d.MessageId,
		ContentType: d.d.ContentType, Timestamp: d.d.Timestamp, Body: d.d.Body,
	}}
}

// retryCopy is the copy for <queue>.retry, back in the queue after delay.
func (d *delivery) retryCopy(delay time.Duration) *republished {
	c := d.copyOf("", retryQueue(d.queue), amqp.Table{txbox.HeaderDeliveries: int64(d.deliveries())})
	c.p.Expiration = strconv.FormatInt(max(delay.Milliseconds(), 1), 10)
	return c
}

// republished is a copy of a delivery and where it is published.
type republished struct {
	exchange, key string
	p             amqp.Publishing
}

func (c *republished) String() string { return fmt.Sprintf("%q/%q", c.exchange, c.key) }

// commit publishes c (mandatory) unless it is nil, runs settle (an ack or
// nack of the original) unless it is nil, and commits both in one
// transaction. It reports whether the broker returned c (no queue took
// it): the rest of the transaction is committed all the same. On an error
// nothing is committed; the original stays unacked (and is requeued when
// the channel closes).
func (st *settler) commit(ctx context.Context, c *republished, settle func() error) (returned bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.drain(func(amqp.Return) bool { return false }) // returns left by a failed transaction
	if c != nil {
		if err := st.ch.PublishWithContext(ctx, c.exchange, c.key, true, false, c.p); err != nil {
			_ = st.ch.TxRollback()
			return false, err
		}
	}
	if settle != nil {
		if err := settle(); err != nil {
			_ = st.ch.TxRollback()
			return false, err
		}
	}
	if err := st.ch.TxCommit(); err != nil {
		return false, err
	}
	if c == nil {
		return false, nil
	}
	// The broker routes a transaction's publishes at the commit and sends
	// a return before the commit-ok: if c was unroutable, its return is
	// queued by now.
	_, returned = st.drain(func(ret amqp.Return) bool {
		return ret.Exchange == c.exchange && ret.RoutingKey == c.key && ret.MessageId == c.p.MessageId
	})
	return returned, nil
}

// drain empties the returns channel and reports a return that match
// accepts, if one was in it.
func (st *settler) drain(match func(amqp.Return) bool) (found amqp.Return, ok bool) {
	for {
		select {
		case ret, open := <-st.returns:
			if !open {
				return found, ok
			}
			if !ok && match(ret) {
				found, ok = ret, true
			}
		default:
			return found, ok
		}
	}
}

// Retry publishes a copy, with its delivery count, to <queue>.retry, whose
// TTL returns it to the queue after delay, then acks the original: two
// transactions, so that an unroutable copy leaves the original to be
// requeued (a consumer killed between them leaves a second copy of a
// retried message, which the inbox drops). A zero delay requeues it in
// place (basic.nack with requeue).
func (d *delivery) Retry(ctx context.Context, delay time.Duration) error {
	requeue := func() error { return d.d.Nack(false, true) }
	if delay <= 0 {
		if err := d.st.settle(ctx, requeue); err != nil {
			return fmt.Errorf("txboxrabbitmq: requeue: %w", err)
		}
		return nil
	}
	c := d.retryCopy(delay)
	returned, err := d.st.commit(ctx, c, nil)
	if err == nil && returned {
		err = errors.New("unroutable")
	}
	if err != nil {
		_, _ = d.st.commit(ctx, nil, requeue)
		return fmt.Errorf("txboxrabbitmq: republish to %s: %w", c, err)
	}
	if err := d.st.settle(ctx, func() error { return d.d.Ack(false) }); err != nil {
		return fmt.Errorf("txboxrabbitmq: ack after the retry copy: %w", err)
	}
	return nil
}

// DeadLetter publishes a copy with the error and the delivery count to the
// exchange <queue>.dlx and acks the original in one transaction. It first
// checks that <queue>.dlq exists: if it does not (or the check fails), the
// original is not acked but retried through <queue>.retry, to come again in
// a second (see Retry: it may come twice, it is never lost). If no queue
// takes the copy all the same (<queue>.dlq deleted after the check, or not
// bound to <queue>.dlx), the broker returns it with the ack committed, and
// the message is put back through <queue>.retry in a second transaction.
func (d *delivery) DeadLetter(ctx context.Context, cause error) error {
	msg := ""
	if cause != nil {
		msg = cause.Error()
		if len(msg) > 4096 {
			msg = msg[:4096]
		}
	}
	c := d.copyOf(deadExchange(d.queue), d.queue, amqp.Table{txbox.HeaderDeliveries: int64(d.deliveries()), txbox.HeaderError: msg, txbox.HeaderBinding: d.queue, HeaderDeadAt: deadAt()})
	if err := d.st.deadQueueMissing(deadQueue(d.queue)); err != nil {
		if rerr := d.Retry(ctx, time.Second); rerr != nil {
			return fmt.Errorf("txboxrabbitmq: dead-letter to %s: %v; not acked: %w", c, err, rerr)
		}
		return fmt.Errorf("txboxrabbitmq: dead-letter to %s: %v; the message comes again from %s", c, err, retryQueue(d.queue))
	}
	returned, err := d.st.commit(ctx, c, func() error { return d.d.Ack(false) })
	if err != nil {
		_, _ = d.st.commit(ctx, nil, func() error { return d.d.Nack(false, true) })
		return fmt.Errorf("txboxrabbitmq: dead-letter to %s: %w", c, err)
	}
	if !returned {
		return nil
	}
	back := d.retryCopy(time.Second)
	if returned, err := d.st.commit(ctx, back, nil); err != nil || returned {
		if err == nil {
			err = errors.New("unroutable")
		}
		return fmt.Errorf("txboxrabbitmq: dead-letter to %s: unroutable, and the copy put back to %s: %v: message %q is lost", c, back, err, d.d.MessageId)
	}
	return fmt.Errorf("txboxrabbitmq: dead-letter to %s: unroutable; the message comes again from %s", c, back)
}

// deadQueueMissing checks with a passive declaration, on a channel of its
// own (a failed one closes its channel), that queue q exists; it returns
// why not, or why it could not tell.
func (st *settler) deadQueueMissing(q string) error {
	ch, err := st.conn.Channel()
	if err != nil {
		return fmt.Errorf("cannot check queue %s: %w", q, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fmt.Errorf("queue %s does not exist", q)
		}
		return fmt.Errorf("cannot check queue %s: %w", q, err)
	}
	return nil
}
