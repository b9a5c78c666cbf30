package consumer

import (
	"context"
	"time"

	"github.com/txbox/txbox"
)

// Message is one delivery of a message, as a handler sees it.
type Message struct {
	// ID is the message's identity, the one the relay set from the outbox
	// id: JetStream's Nats-Msg-Id header, RabbitMQ's message_id property.
	// Inbox handlers deduplicate on it. Topic is the subject or routing key
	// it arrived on. Key is empty (brokers do not carry it).
	txbox.Message
	// Deliveries counts the deliveries of this message to this binding,
	// this one included: 1 the first time.
	Deliveries int
	// Binding is the binding the message came from.
	Binding string
}

// Subscriber is the broker side of a Consumer: it checks and opens
// bindings. natsjs.Subscriber and rabbitmq.Subscriber implement it.
type Subscriber interface {
	// CheckBinding reports whether binding exists on the broker and can be
	// consumed from, with an error saying what is missing.
	CheckBinding(ctx context.Context, binding string) error
	// Subscribe starts receiving from binding. prefetch is how many
	// unacknowledged messages the broker may hand over at once.
	Subscribe(ctx context.Context, binding string, prefetch int) (Subscription, error)
}

// Subscription is an open binding.
type Subscription interface {
	// Next blocks until a message arrives or ctx ends (then it returns
	// ctx's error). A lost connection is not an error: the subscription
	// reconnects and Next goes on waiting. Any other error is returned; the
	// consumer waits a little and calls Next again.
	Next(ctx context.Context) (Delivery, error)
	// Close stops receiving. Messages received from the broker but not
	// returned by Next are released for redelivery.
	Close(ctx context.Context) error
}

// Delivery is one received message and its settlement. Exactly one of Ack,
// Retry and DeadLetter is called for each delivery (none, if the process
// dies: the broker then redelivers it).
type Delivery interface {
	Message() Message
	// Ack settles the message as done.
	Ack(ctx context.Context) error
	// Retry releases the message for redelivery after delay (as near as
	// the broker can).
	Retry(ctx context.Context, delay time.Duration) error
	// DeadLetter moves the message to the binding's dead letters with
	// cause and the delivery count, then settles the original.
	DeadLetter(ctx context.Context, cause error) error
}
