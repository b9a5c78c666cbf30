package txbox

import (
	"fmt"
	"strings"
	"time"
)

// Message is one event to deliver.
type Message struct {
	// ID identifies the message end to end: the relay sends it as the
	// broker's dedupe id (JetStream Nats-Msg-Id, RabbitMQ message_id, …) and
	// consumers' inboxes dedupe on it. Empty means a new UUIDv7. Callers may
	// set their own id to make a producer idempotent.
	ID string
	// Topic is where the message goes: a NATS subject, a RabbitMQ routing
	// key, a Redis stream, a Kafka topic (see each publisher). Required.
	Topic string
	// Key orders messages: messages with the same non-empty key are
	// delivered in commit order. Empty means unordered.
	Key string
	// Payload is the message body, opaque to txbox.
	Payload []byte
	// Headers travel as broker headers. Names that could change a message's
	// identity (see ErrReservedHeader) are refused.
	Headers map[string]string
}

// Record is a message as stored in the outbox, as the relay reads it.
type Record struct {
	Message
	// Seq is the row's id in the outbox table.
	Seq int64
	// CreatedAt is when the row was inserted (the transaction's time).
	CreatedAt time.Time
	// Attempts counts earlier deliveries the broker rejected.
	Attempts int
}

// Limits on message fields; see [Config.MaxPayloadBytes] for the payload.
const (
	MaxIDLen        = 256
	MaxTopicLen     = 256
	MaxKeyLen       = 256
	MaxHeaderLen    = 256
	MaxHeaderValLen = 8 << 10
)

// reservedHeaderPrefixes are header name prefixes (lower case) that brokers
// or txbox give meaning to; a user header must never set them.
var reservedHeaderPrefixes = []string{"nats-", "txbox-"}

// reservedHeaders are header names (lower case) that carry a message's
// identity on some broker.
var reservedHeaders = map[string]bool{"message-id": true, "message_id": true, "messageid": true}

// IsReservedHeader reports whether a header name is reserved for txbox and
// the brokers (Nats-*, Txbox-*, Message-Id and its spellings).
func IsReservedHeader(name string) bool {
	l := strings.ToLower(name)
	if reservedHeaders[l] {
		return true
	}
	for _, p := range reservedHeaderPrefixes {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// validate checks m against the limits; maxPayload <= 0 means no cap.
func (m *Message) validate(maxPayload int) error {
	if m.Topic == "" {
		return &InvalidMessageError{ID: m.ID, Field: "topic", Reason: "is empty"}
	}
	if err := checkText("topic", m.Topic, MaxTopicLen); err != nil {
		return m.invalid(err)
	}
	if m.ID != "" {
		if err := checkText("id", m.ID, MaxIDLen); err != nil {
			return m.invalid(err)
		}
	}
	if m.Key != "" {
		if err := checkText("key", m.Key, MaxKeyLen); err != nil {
			return m.invalid(err)
		}
	}
	if maxPayload > 0 && len(m.Payload) > maxPayload {
		return &InvalidMessageError{ID: m.ID, Field: "payload", Reason: fmt.Sprintf("is %d bytes, over the cap of %d", len(m.Payload), maxPayload), Err: ErrPayloadTooLarge}
	}
	for k, v := range m.Headers {
		if k == "" {
			return &InvalidMessageError{ID: m.ID, Field: "headers", Reason: "has an empty name"}
		}
		if IsReservedHeader(k) {
			return &InvalidMessageError{ID: m.ID, Field: "headers", Reason: fmt.Sprintf("name %q is reserved: a header may not set a message's identity", k), Err: ErrReservedHeader}
		}
		if err := checkText("header name", k, MaxHeaderLen); err != nil {
			return m.invalid(err)
		}
		if len(v) > MaxHeaderValLen {
			return &InvalidMessageError{ID: m.ID, Field: "headers", Reason: fmt.Sprintf("value of %q is longer than %d bytes", k, MaxHeaderValLen)}
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return &InvalidMessageError{ID: m.ID, Field: "headers", Reason: fmt.Sprintf("value of %q contains CR, LF or NUL", k)}
		}
	}
	return nil
}

type fieldError struct{ field, reason string }

func (e fieldError) Error() string { return e.field + " " + e.reason }

func (m *Message) invalid(err error) error {
	fe := err.(fieldError)
	return &InvalidMessageError{ID: m.ID, Field: fe.field, Reason: fe.reason}
}

// checkText refuses empty, oversized and control-character text.
func checkText(field, s string, max int) error {
	if len(s) > max {
		return fieldError{field, fmt.Sprintf("is %d bytes, over the limit of %d", len(s), max)}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fieldError{field, fmt.Sprintf("contains control character %#x at byte %d", c, i)}
		}
	}
	return nil
}
