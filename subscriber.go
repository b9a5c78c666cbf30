package txbox

import (
	"context"
	"time"
)

// Received is one delivery of a message, as a consumer sees it.
type Received struct {
	// Message is the message as the broker carried it. ID is its identity,
	// the one the relay set from the outbox id (JetStream's Nats-Msg-Id,
	// RabbitMQ's message_id, …): inbox handlers deduplicate on it. Topic is
	// the subject, routing key, stream or topic it arrived on. Key is set
	// where the broker carries it.
	Message
	// Deliveries counts the deliveries of this message to this binding,
	// this one included: 1 the first time.
	Deliveries int
	// Binding is the binding the message came from.
	Binding string
}

// Subscriber is the broker side of a consumer: it checks and opens bindings
// (a JetStream durable, a RabbitMQ queue, a Redis consumer group, a Kafka
// group). Every broker package of txbox has one.
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
	Message() Received
	// Ack settles the message as done.
	Ack(ctx context.Context) error
	// Retry releases the message for redelivery after delay (as near as
	// the broker can).
	Retry(ctx context.Context, delay time.Duration) error
	// DeadLetter moves the message to the binding's dead letters with
	// cause and the delivery count, then settles the original.
	DeadLetter(ctx context.Context, cause error) error
}

// Headers that txbox's broker adapters set on the copies they make of a
// message (retries and dead letters) where the broker has no field of its
// own for them. A user header may not use these names (see
// IsReservedHeader).
const (
	HeaderMessageID  = "Txbox-Message-Id" // the message id, where the broker has no id field or the copy must not be deduplicated
	HeaderDeliveries = "Txbox-Deliveries" // deliveries so far
	HeaderError      = "Txbox-Error"      // why the message was dead-lettered
	HeaderBinding    = "Txbox-Binding"    // the binding it was dead-lettered from
	HeaderTopic      = "Txbox-Topic"      // the topic it was first published to
	// HeaderKey is the ordering key (Message.Key) on brokers without a key
	// field of their own (NATS, RabbitMQ, asynq); absent for an unordered
	// message.
	HeaderKey = "Txbox-Key"
	// HeaderCreatedAt is the row's created_at (Message.CreatedAt), RFC 3339
	// in UTC with nine fractional digits (2006-01-02T15:04:05.000000000Z,
	// so that the text sorts as the time), on every broker but Redis
	// Streams (its field created_at).
	HeaderCreatedAt = "Txbox-Created-At"
)

// HeaderContentType is the header whose value is the payload's media type
// (any case on the way in). RabbitMQ carries it as the content_type
// property; CloudEvents' datacontenttype is it.
const HeaderContentType = "Content-Type"
