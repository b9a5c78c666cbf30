package txbox

import "context"

// Publisher delivers messages to a broker. Implementations: natsjs (NATS
// JetStream), and the others in this module's broker packages.
type Publisher interface {
	// Publish sends msgs, pipelined, and waits until the broker has
	// acknowledged each one or ctx ends. It returns nil when every message
	// was acknowledged, else a slice aligned with msgs holding each
	// message's error (nil where acknowledged). A message the broker
	// refused is reported with Reject(err); any other error is transient.
	//
	// A publisher must send msg.ID as the broker's dedupe or message id
	// where the broker has one, after the message's headers, so that no
	// header can overwrite it.
	//
	// A publisher that can never publish again (its connection is closed
	// for good) returns errors that wrap ErrPublisherClosed.
	Publish(ctx context.Context, msgs []Message) []error
}

// MessageChecker is an optional capability of a Publisher: CheckMessage
// says, without a broker call, why the broker would always refuse m (a
// subject it cannot carry, a header it cannot encode, a size over its
// limit), or returns nil. The relay checks every claimed row against the
// message contract (Message.Validate) and then with CheckMessage, and
// parks a message that fails either as dead at once, with the error, so
// that it costs no broker call, no retries and no other message's time.
type MessageChecker interface {
	CheckMessage(m Message) error
}

// ConnectionChecker is an optional capability of a Publisher: Connected
// reports, without a broker call, whether the publisher's connection to the
// broker is up now. After a round failed while Connected was false, the relay
// looks at Connected every few milliseconds instead of sleeping out its
// backoff, and starts the next round as soon as it turns true, so that
// delivery resumes as soon as the broker is back.
type ConnectionChecker interface {
	Connected() bool
}

// DuplicateCounter is an optional capability of a Publisher whose broker
// says, in its ack, that it already held a message with the same id and
// dropped this copy (NATS JetStream's PubAck.Duplicate): Duplicates returns
// how many acks said so since the publisher was made. Such a message counts
// as acknowledged. txbox's own publishers also tell the relay which
// messages of a Publish call those were, so that a relay counts its own
// only, also when one publisher serves several relays (a relay.Group).
type DuplicateCounter interface {
	Duplicates() int64
}
