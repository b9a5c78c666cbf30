package txbox

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
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
	// identity (see ErrReservedHeader) are refused. A Content-Type header
	// (any case, at most once) is the payload's media type: RabbitMQ
	// carries it as the content_type property, the other brokers as the
	// header Content-Type (Redis h:Content-Type; Kafka content-type with
	// CloudEvents), whatever the case it was written in.
	Headers map[string]string
	// CreatedAt is when the message was written to the outbox (the row's
	// created_at, the database's clock): the relay sets it from the row and
	// the publishers carry it (HeaderCreatedAt, docs/reference/wire-format.md);
	// consumers read it back where it was carried (zero otherwise). Add
	// ignores it: the database sets created_at.
	CreatedAt time.Time
	// DeliverAt schedules the message: the row commits with the caller's
	// transaction and the relay publishes it at or after this instant (by
	// the database's clock; on SQLite, the relay's), never before. Zero, or
	// an instant not after the time of Add, means at once. The instant is
	// what counts: its zone and monotonic clock reading are dropped, and
	// it is rounded up to the microsecond the tables store. A keyed
	// message holds its key's later messages behind it until it is
	// delivered (docs/guide/delayed-delivery.md). Outbox.Cancel discards
	// a message not yet delivered. The relay does not set it on the
	// messages it reads.
	DeliverAt time.Time
}

// MaxDeliverAt is the latest Message.DeliverAt: the end of year 9999, the
// last instant every table's timestamp column holds (MySQL's DATETIME).
var MaxDeliverAt = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)

// deliverAt returns when m is due as the table stores it, rounded up to
// the microsecond and in UTC, or the zero time when it is due by now.
func (m *Message) deliverAt(now time.Time) time.Time {
	if m.DeliverAt.IsZero() || !m.DeliverAt.After(now) {
		return time.Time{}
	}
	t := m.DeliverAt.Round(0).UTC()
	if r := t.Truncate(time.Microsecond); r.Before(t) {
		t = r.Add(time.Microsecond)
	}
	return t
}

// Record is a message as stored in the outbox, as the relay reads it.
type Record struct {
	Message
	// Seq is the row's id in the outbox table. (The row's created_at is
	// Message.CreatedAt.)
	Seq int64
	// Attempts counts earlier deliveries the broker rejected.
	Attempts int
}

// Limits on message fields; see [Config.MaxMessageBytes] for the payload
// and headers together.
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
var reservedHeaders = []string{"message-id", "message_id", "messageid"}

// claimCheckLower is HeaderClaimCheck in lower case: a Txbox-* name that
// is not reserved.
const claimCheckLower = "txbox-claim-check"

// IsReservedHeader reports whether a header name is reserved for txbox and
// the brokers (Nats-*, Txbox-*, Message-Id and its spellings), which a row
// never carries to the broker. HeaderClaimCheck is not reserved: it
// travels like a user header.
func IsReservedHeader(name string) bool {
	if r, ok := reservedASCII(name); ok { // no allocation: called per header and message
		return r
	}
	l := strings.ToLower(name)
	if l == claimCheckLower {
		return false
	}
	if slices.Contains(reservedHeaders, l) {
		return true
	}
	for _, p := range reservedHeaderPrefixes {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// Validate checks m against the message contract (docs/reference/sql-contract.md
// states it per column) and returns an *InvalidMessageError saying which
// field breaks which rule, or nil. maxBytes caps the payload and the
// headers together (<= 0: no cap). An empty ID passes: Add fills it in.
//
// The rules are what every broker txbox ships for carries unchanged:
//   - topic: 1 to MaxTopicLen bytes of UTF-8, no white space (any that
//     unicode.IsSpace reports: U+3000 too), no control character;
//   - id, key: at most MaxIDLen / MaxKeyLen bytes of UTF-8, no control
//     character;
//   - header names: 1 to MaxHeaderLen bytes, an HTTP token (letters,
//     digits and !#$%&'*+-.^_`|~), not reserved (IsReservedHeader), at
//     most one Content-Type in any case;
//   - header values: at most MaxHeaderValLen bytes of UTF-8, no control
//     character but tab, no leading or trailing space or tab (NATS trims
//     them);
//   - deliver_at: not after MaxDeliverAt.
func (m *Message) Validate(maxBytes int) error {
	if m.Topic == "" {
		return &InvalidMessageError{ID: m.ID, Field: "topic", Reason: "is empty"}
	}
	if err := checkText("topic", m.Topic, MaxTopicLen); err != nil {
		return m.invalid(err)
	}
	if i := indexSpace(m.Topic); i >= 0 {
		r, _ := utf8.DecodeRuneInString(m.Topic[i:])
		return &InvalidMessageError{ID: m.ID, Field: "topic", Reason: fmt.Sprintf("contains white space (%U) at byte %d", r, i)}
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
	if m.DeliverAt.After(MaxDeliverAt) {
		return &InvalidMessageError{ID: m.ID, Field: "deliver_at", Reason: fmt.Sprintf("%s is after %s, the latest time the tables hold", m.DeliverAt.UTC().Format(time.RFC3339Nano), MaxDeliverAt.Format(time.RFC3339))}
	}
	size := len(m.Payload)
	ct := ""
	for k, v := range m.Headers {
		size += len(k) + len(v)
		if err := checkHeader(k, v); err != nil {
			err.ID = m.ID
			return err
		}
		if len(k) == len(HeaderContentType) && strings.EqualFold(k, HeaderContentType) {
			if ct != "" {
				return &InvalidMessageError{ID: m.ID, Field: "headers", Reason: fmt.Sprintf("has the content type twice, as %q and %q: the brokers carry one Content-Type", ct, k)}
			}
			ct = k
		}
	}
	if maxBytes > 0 && size > maxBytes {
		return &InvalidMessageError{ID: m.ID, Field: "payload", Reason: fmt.Sprintf("and headers are %d bytes, over the cap of %d", size, maxBytes), Err: ErrPayloadTooLarge}
	}
	return nil
}

// checkHeader applies the header rules of Validate to one header; the
// error has no ID.
func checkHeader(k, v string) *InvalidMessageError {
	if k == "" {
		return &InvalidMessageError{Field: "headers", Reason: "has an empty name"}
	}
	if IsReservedHeader(k) {
		return &InvalidMessageError{Field: "headers", Reason: fmt.Sprintf("name %q is reserved: a header may not set a message's identity", k), Err: ErrReservedHeader}
	}
	if len(k) > MaxHeaderLen {
		return &InvalidMessageError{Field: "headers", Reason: fmt.Sprintf("name of %d bytes, over the limit of %d", len(k), MaxHeaderLen)}
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			r, _ := utf8.DecodeRuneInString(k[i:])
			return &InvalidMessageError{Field: "headers", Reason: fmt.Sprintf("name %q has %q at byte %d: a header name is letters, digits and !#$%%&'*+-.^_`|~", k, r, i)}
		}
	}
	if len(v) > MaxHeaderValLen {
		return &InvalidMessageError{Field: "headers", Reason: fmt.Sprintf("value of %q is longer than %d bytes", k, MaxHeaderValLen)}
	}
	if !utf8.ValidString(v) {
		return &InvalidMessageError{Field: "headers", Reason: fmt.Sprintf("value of %q is not valid UTF-8", k)}
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return &InvalidMessageError{Field: "headers", Reason: fmt.Sprintf("value of %q contains control character %#x at byte %d", k, c, i)}
		}
	}
	if v != strings.Trim(v, " \t") {
		return &InvalidMessageError{Field: "headers", Reason: fmt.Sprintf("value of %q begins or ends with white space, which NATS trims", k)}
	}
	return nil
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110),
// the header names every broker carries alike.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

type fieldError struct{ field, reason string }

func (e fieldError) Error() string { return e.field + " " + e.reason }

func (m *Message) invalid(err error) error {
	fe := err.(fieldError)
	return &InvalidMessageError{ID: m.ID, Field: fe.field, Reason: fe.reason}
}

// indexSpace is the index of the first white space character of s
// (unicode.IsSpace: ASCII space, tab and line breaks, U+0085, U+00A0 and
// the Unicode space separators, U+1680, U+2000 to U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000), or -1; byte by byte while s is ASCII, since
// every message relayed is checked.
func indexSpace(s string) int {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ' || ('\t' <= c && c <= '\r'):
			return i
		case c >= utf8.RuneSelf:
			if j := strings.IndexFunc(s[i:], unicode.IsSpace); j >= 0 {
				return i + j
			}
			return -1
		}
	}
	return -1
}

// checkText refuses oversized text, invalid UTF-8 and control characters.
func checkText(field, s string, max int) error {
	if len(s) > max {
		return fieldError{field, fmt.Sprintf("is %d bytes, over the limit of %d", len(s), max)}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fieldError{field, fmt.Sprintf("contains control character %#x at byte %d", c, i)}
		}
	}
	if !utf8.ValidString(s) {
		return fieldError{field, "is not valid UTF-8"}
	}
	return nil
}
