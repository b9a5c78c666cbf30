// Package txboxrabbitmq connects txbox to RabbitMQ (AMQP 0-9-1, through
// github.com/rabbitmq/amqp091-go): a Publisher for the relay and a
// Subscriber for package consumer.
//
// Both open their channels on a Conn the caller makes with NewConn and
// closes when done: an amqp091 connection cannot reconnect, a Conn redials
// after the broker or the network dropped it.
//
// The Publisher sends each message persistent, with publisher confirms,
// message_id set to the message id (after the headers, so no header can
// change it) and mandatory routing (unless PublisherConfig.AllowUnroutable):
// a message no queue is bound to comes
// back (basic.return) and is reported with txbox.Reject, so it counts
// toward the relay's attempt budget and ends dead instead of vanishing; a
// lost connection, a closed channel, a broker nack or a confirm that does
// not arrive in time is transient and costs nothing.
//
// The Subscriber consumes a durable queue with manual acks and a prefetch.
// DeclareQueue creates a queue with what the Subscriber needs around it:
// <queue>.retry (failed messages wait there for their backoff, then return
// to the queue) and the dead-letter exchange <queue>.dlx with its queue
// <queue>.dlq.
package txboxrabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Exchange receives every message, with the message's topic as the
	// routing key. Default: "" (the default exchange: the topic is a queue
	// name).
	Exchange string
	// Prefix is put before every topic to form the routing key;
	// CheckPrefix says what it may hold. Default: "" (routing key =
	// topic).
	Prefix string
	// AllowUnroutable publishes without the mandatory flag: a message no
	// queue is bound to is dropped by the broker and counts as published.
	// Default: false (mandatory: an unroutable message comes back and is
	// reported with txbox.Reject, so it ends dead instead of vanishing).
	AllowUnroutable bool
	// CloudEventsSource, when set, adds the CloudEvents binary-mode
	// attributes as headers (AMQP protocol binding) named with the prefix
	// "cloudEvents" and CloudEventsSeparator: cloudEvents_specversion 1.0,
	// cloudEvents_id = message id, cloudEvents_source = CloudEventsSource,
	// cloudEvents_type = topic, cloudEvents_time = created-at;
	// datacontenttype is the content_type property. The names beginning
	// with "cloudEvents" (any case) are then reserved, so that one message
	// carries one separator: CheckMessage refuses a message whose own
	// headers use one, and the relay parks it dead. Default: "" (none).
	CloudEventsSource string
	// CloudEventsSeparator is the separator between "cloudEvents" and the
	// attribute names: "_" (what JMS 2.0 consumers, Spring's CloudEvents
	// AMQP support and the binding's recommendation read) or ":" (what the
	// CloudEvents Go SDK's and Java SDK's AMQP bindings read). Default: "_".
	CloudEventsSeparator string
}

// Publisher publishes to RabbitMQ with publisher confirms, on a channel of
// its own on conn; it opens a new channel after the channel or the
// connection failed. It is safe for concurrent use; Publish calls run one
// at a time.
type Publisher struct {
	conn    *Conn
	cfg     PublisherConfig
	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
	owned   bool // made by FromURL: Close closes conn
}

var (
	_ txbox.Publisher      = (*Publisher)(nil)
	_ txbox.MessageChecker = (*Publisher)(nil)
)

// NewPublisher returns a Publisher over conn, a connection the caller
// made; whoever created it closes it. It opens no channel yet.
func NewPublisher(conn *Conn, cfg PublisherConfig) (*Publisher, error) {
	if err := CheckPrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: rabbitmq: Prefix %w", txbox.ErrInvalidConfig, err)
	}
	if err := CheckExchange(cfg.Exchange); err != nil {
		return nil, fmt.Errorf("%w: rabbitmq: Exchange %w", txbox.ErrInvalidConfig, err)
	}
	if conn == nil {
		return nil, fmt.Errorf("%w: rabbitmq: nil connection", txbox.ErrInvalidConfig)
	}
	switch cfg.CloudEventsSeparator {
	case "":
		cfg.CloudEventsSeparator = "_"
	case "_", ":":
	default:
		return nil, fmt.Errorf("%w: rabbitmq: CloudEventsSeparator %q: want \"_\" or \":\"", txbox.ErrInvalidConfig, cfg.CloudEventsSeparator)
	}
	return &Publisher{conn: conn, cfg: cfg}, nil
}

// CheckMessage refuses, with txbox.Reject wrapping txbox.ErrReservedHeader,
// a message with a header whose name begins with "cloudEvents" (any case)
// while CloudEventsSource is set: those names are the CloudEvents
// attributes the Publisher writes. See txbox.MessageChecker.
func (p *Publisher) CheckMessage(m txbox.Message) error {
	if p.cfg.CloudEventsSource == "" {
		return nil
	}
	for k := range m.Headers {
		if wire.HasPrefixFold(k, CloudEventsPrefix) {
			return txbox.Reject(fmt.Errorf("txboxrabbitmq: header name %q is reserved: with CloudEventsSource set, cloudEvents* headers (any case, either separator) are the CloudEvents attributes txbox writes: %w",
				k, txbox.ErrReservedHeader))
		}
	}
	return nil
}

// channel returns the confirm-mode channel, opening it if needed.
func (p *Publisher) channel() (*amqp.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	p.reset()
	ch, err := p.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("txboxrabbitmq: open confirm channel: %w", err)
	}
	p.ch = ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 1024))
	return ch, nil
}

func (p *Publisher) reset() {
	if p.ch != nil {
		_ = p.ch.Close()
	}
	p.ch, p.returns = nil, nil
}

// Close closes the Publisher's channel, and the Conn of a Publisher that
// FromURL made; a Publisher from NewPublisher leaves the Conn open.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset()
	if p.owned {
		return p.conn.Close()
	}
	return nil
}

// RoutingKey returns the routing key a topic is published with.
func (p *Publisher) RoutingKey(topic string) string { return p.cfg.Prefix + topic }

// Publishing builds the AMQP message for m (docs/reference/wire-format.md):
// persistent; content_type from the Content-Type header (any case; taken
// out of the headers); timestamp = created-at (seconds; the publish time
// for a message without one); the other user headers (minus reserved
// names, and cloudEvents* names when CloudEvents are on), Txbox-Key,
// Txbox-Created-At, the CloudEvents attributes if configured; then
// message_id = m.ID.
func (p *Publisher) Publishing(m txbox.Message) amqp.Publishing {
	h := amqp.Table{}
	ctName, ct := wire.ContentType(m.Headers)
	ce := p.cfg.CloudEventsSource != ""
	for k, v := range m.Headers {
		if !txbox.IsReservedHeader(k) && k != ctName && (!ce || !wire.HasPrefixFold(k, CloudEventsPrefix)) {
			h[k] = v
		}
	}
	if m.Key != "" {
		h[txbox.HeaderKey] = m.Key
	}
	ts := time.Now()
	if !m.CreatedAt.IsZero() {
		h[txbox.HeaderCreatedAt] = wire.Time(m.CreatedAt)
		ts = m.CreatedAt
	}
	if ce {
		prefix := CloudEventsPrefix + p.cfg.CloudEventsSeparator
		for _, a := range wire.CloudEvents(m.ID, m.Topic, p.cfg.CloudEventsSource, m.CreatedAt) {
			h[prefix+a.Name] = a.Value
		}
	}
	return amqp.Publishing{
		Headers:      h,
		ContentType:  ct,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Timestamp:    ts,
		Body:         m.Payload,
	}
}

// CloudEventsPrefix, then PublisherConfig.CloudEventsSeparator, is put
// before the CloudEvents attribute names in the headers (the AMQP protocol
// binding's application-properties prefix).
const CloudEventsPrefix = "cloudEvents"

// Publish sends msgs and waits for their confirms; see txbox.Publisher.
func (p *Publisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	ch, err := p.channel()
	if err != nil {
		for i := range msgs {
			fail(i, err)
		}
		return errs
	}
	returns := p.returns
	confs := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, p.RoutingKey(m.Topic), !p.cfg.AllowUnroutable, false, p.Publishing(m))
		if err != nil {
			fail(i, fmt.Errorf("txboxrabbitmq: publish: %w", err))
			continue
		}
		confs[i] = c
	}
	// A return names its message by id and routing key; two messages alike
	// in both (or both without an id) route alike, so sharing an entry is
	// right for them.
	type route struct{ id, key string }
	returned := map[route]amqp.Return{}
	broken := false
	for i, c := range confs {
		if c == nil {
			broken = true
			continue
		}
	wait:
		for {
			select {
			case <-c.Done():
				break wait
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				returned[route{r.MessageId, r.RoutingKey}] = r
			case <-ctx.Done():
				break wait
			}
		}
		select {
		case <-c.Done():
		default:
			// No confirm in time: the channel's state is unknown, start over.
			broken = true
			fail(i, fmt.Errorf("txboxrabbitmq: waiting for confirm: %w", ctx.Err()))
			continue
		}
		// A return precedes its ack on the channel; collect any queued.
	drain:
		for returns != nil {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					break drain
				}
				returned[route{r.MessageId, r.RoutingKey}] = r
			default:
				break drain
			}
		}
		if r, ok := returned[route{msgs[i].ID, p.RoutingKey(msgs[i].Topic)}]; ok {
			fail(i, txbox.Reject(fmt.Errorf("txboxrabbitmq: unroutable: %d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)))
			continue
		}
		if !c.Acked() {
			broken = broken || ch.IsClosed()
			fail(i, errors.New("txboxrabbitmq: not confirmed (broker nack or channel closed)"))
		}
	}
	if broken || ch.IsClosed() {
		p.reset()
	}
	return errs
}
