package txboxrabbitmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/internal/wire"
)

// HeaderDeadAt is the time a dead letter was dead-lettered, RFC 3339 in
// UTC, a header of the copy in <queue>.dlq.
const HeaderDeadAt = "Txbox-Dead-At"

// maxScan bounds how many dead letters one call of DeadLetters reads.
const maxScan = 100000

// DeadLetters implements dlq.Store on RabbitMQ: a binding is a queue, its
// dead letters are the messages of <queue>.dlq (see DeclareQueue), and a
// Ref is a dead letter's message id. A queue cannot be browsed: each call
// takes the dead letters one by one (basic.get, unacknowledged) on a
// channel of its own, and the broker puts those it does not remove back
// in their places when the channel closes. A dead letter read meanwhile
// by another client is not seen.
type DeadLetters struct {
	conn  *Conn
	owned bool // made by DeadLettersFromURL: Close closes conn
}

var _ dlq.Store = (*DeadLetters)(nil)

// NewDeadLetters returns the dead letters of the queues on conn.
func NewDeadLetters(conn *Conn) (*DeadLetters, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: rabbitmq: nil connection", txbox.ErrInvalidConfig)
	}
	return &DeadLetters{conn: conn}, nil
}

// scan reads the dead letters of queue on a channel in confirm mode and
// calls visit for each, until visit says stop or the queue is read; the
// dead letters visit did not ack are requeued when scan returns.
func (d *DeadLetters) scan(ctx context.Context, queue string, visit func(ch *amqp.Channel, m amqp.Delivery, l dlq.Letter) (stop bool, err error)) error {
	if queue == "" {
		return errors.New("txboxrabbitmq: binding: want a queue name")
	}
	if err := (&settler{conn: d.conn}).deadQueueMissing(deadQueue(queue)); err != nil {
		return fmt.Errorf("txboxrabbitmq: dead letters of %s: %v", queue, err)
	}
	ch, err := d.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("txboxrabbitmq: confirm mode: %w", err)
	}
	for range maxScan {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, ok, err := ch.Get(deadQueue(queue), false)
		if err != nil {
			return fmt.Errorf("txboxrabbitmq: basic.get %s: %w", deadQueue(queue), err)
		}
		if !ok {
			return nil
		}
		if stop, err := visit(ch, m, deadLetterOf(queue, m)); stop || err != nil {
			return err
		}
	}
	return fmt.Errorf("txboxrabbitmq: %s holds more than %d dead letters; read %d", deadQueue(queue), maxScan, maxScan)
}

// deadLetterOf decodes a dead letter of queue.
func deadLetterOf(queue string, m amqp.Delivery) dlq.Letter {
	h := map[string]string{}
	for k, v := range m.Headers {
		if s, ok := wire.String(v); ok {
			h[k] = s
		}
	}
	l := dlq.Letter{Ref: m.MessageId, Binding: queue, Error: h[txbox.HeaderError], DeadAt: wire.ParseTime(h[HeaderDeadAt])}
	fmt.Sscan(h[txbox.HeaderDeliveries], &l.Deliveries)
	l.ID, l.Topic, l.Key, l.Payload = m.MessageId, h[txbox.HeaderTopic], h[txbox.HeaderKey], m.Body
	l.CreatedAt = wire.ParseTime(h[txbox.HeaderCreatedAt])
	if l.CreatedAt.IsZero() && !m.Timestamp.IsZero() {
		l.CreatedAt = m.Timestamp
	}
	for _, k := range []string{txbox.HeaderError, txbox.HeaderDeliveries, txbox.HeaderBinding, txbox.HeaderTopic, txbox.HeaderKey, txbox.HeaderCreatedAt, HeaderDeadAt} {
		delete(h, k)
	}
	if m.ContentType != "" {
		h[txbox.HeaderContentType] = m.ContentType
	}
	if len(h) > 0 {
		l.Headers = h
	}
	return l
}

// List returns the dead letters of the queue named binding that match q,
// in queue order. After is a message id: the page starts after the first
// dead letter with that id.
func (d *DeadLetters) List(ctx context.Context, binding string, q dlq.Query) (dlq.Page, error) {
	var p dlq.Page
	skipping := q.After != ""
	err := d.scan(ctx, binding, func(_ *amqp.Channel, _ amqp.Delivery, l dlq.Letter) (bool, error) {
		if skipping {
			skipping = l.Ref != q.After
			return false, nil
		}
		if !q.Match(l) {
			return false, nil
		}
		if len(p.Letters) == max(q.Limit, 1) {
			p.More = true
			return true, nil
		}
		p.Letters = append(p.Letters, l)
		return false, nil
	})
	return p, err
}

// Get returns the first dead letter of the queue whose message id is ref.
func (d *DeadLetters) Get(ctx context.Context, binding, ref string) (dlq.Letter, error) {
	var out *dlq.Letter
	err := d.scan(ctx, binding, func(_ *amqp.Channel, _ amqp.Delivery, l dlq.Letter) (bool, error) {
		if l.Ref == ref {
			out = &l
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return dlq.Letter{}, err
	}
	if out == nil {
		return dlq.Letter{}, fmt.Errorf("%w: no message id %q in %s", dlq.ErrNotFound, ref, deadQueue(binding))
	}
	return *out, nil
}

// Redrive sends each dead letter back through <queue>.retry, whose TTL
// returns it to the queue at once: with its message id, payload, headers
// and original topic (Txbox-Topic), and a fresh delivery count. Once the
// broker confirms the copy, the dead letter is acked (removed).
func (d *DeadLetters) Redrive(ctx context.Context, binding string, refs []string) (dlq.Result, error) {
	return d.each(ctx, binding, refs, func(ch *amqp.Channel, m amqp.Delivery) error {
		h := amqp.Table{}
		for k, v := range m.Headers {
			switch k {
			case "x-death", txbox.HeaderError, txbox.HeaderBinding, HeaderDeadAt:
			default:
				h[k] = v
			}
		}
		h[txbox.HeaderDeliveries] = int64(0)
		p := amqp.Publishing{Headers: h, DeliveryMode: amqp.Persistent, MessageId: m.MessageId,
			ContentType: m.ContentType, Timestamp: m.Timestamp, Body: m.Body, Expiration: "1"}
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", retryQueue(binding), false, false, p)
		if err != nil {
			return fmt.Errorf("txboxrabbitmq: redrive %q to %s: %w", m.MessageId, retryQueue(binding), err)
		}
		ok, err := conf.WaitContext(ctx)
		if err != nil || !ok {
			return fmt.Errorf("txboxrabbitmq: redrive %q to %s: not confirmed by the broker (%v)", m.MessageId, retryQueue(binding), err)
		}
		return nil
	})
}

// Discard removes the dead letters.
func (d *DeadLetters) Discard(ctx context.Context, binding string, refs []string) (dlq.Result, error) {
	return d.each(ctx, binding, refs, func(*amqp.Channel, amqp.Delivery) error { return nil })
}

// each reads the queue's dead letters once, runs do on those named by
// refs, then acks them.
func (d *DeadLetters) each(ctx context.Context, binding string, refs []string, do func(*amqp.Channel, amqp.Delivery) error) (dlq.Result, error) {
	var r dlq.Result
	left := slices.Clone(refs)
	err := d.scan(ctx, binding, func(ch *amqp.Channel, m amqp.Delivery, l dlq.Letter) (bool, error) {
		i := slices.Index(left, l.Ref)
		if i < 0 {
			return false, nil
		}
		if err := do(ch, m); err != nil {
			return true, err
		}
		if err := m.Ack(false); err != nil {
			return true, fmt.Errorf("txboxrabbitmq: ack dead letter %q: %w", l.Ref, err)
		}
		r.Done = append(r.Done, l.Ref)
		left = slices.Delete(left, i, i+1)
		return len(left) == 0, nil
	})
	r.Missed = left
	if err != nil {
		r.Missed = nil
	}
	return r, err
}

// deadAt is the value of HeaderDeadAt for now.
func deadAt() string { return wire.Time(time.Now()) }
