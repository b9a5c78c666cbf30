// Package wire holds what the broker adapters put on the wire alike: the
// created-at text, the CloudEvents attributes, the content type's header
// (docs/reference/wire-format.md).
package wire

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Layout is txbox.CreatedAtLayout (an internal package may not import the
// root one): RFC 3339, nine fractional digits, UTC.
const Layout = "2006-01-02T15:04:05.000000000Z07:00"

// Time formats t with Layout in UTC; "" for the zero time. Every relayed
// message carries one: years 0 to 9999 are written digit by digit, at a
// fraction of time.Format's cost, others by time.Format.
func Time(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.Format(Layout)
	}
	hour, minute, sec := t.Clock()
	var b [len("2006-01-02T15:04:05.000000000Z")]byte
	digits(b[0:4], year)
	b[4] = '-'
	digits(b[5:7], int(month))
	b[7] = '-'
	digits(b[8:10], day)
	b[10] = 'T'
	digits(b[11:13], hour)
	b[13] = ':'
	digits(b[14:16], minute)
	b[16] = ':'
	digits(b[17:19], sec)
	b[19] = '.'
	digits(b[20:29], t.Nanosecond())
	b[29] = 'Z'
	return string(b[:])
}

// digits writes n's last len(b) decimal digits to b, zero-padded.
func digits(b []byte, n int) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
}

// ParseTime parses a created-at text (any RFC 3339 time); the zero time if
// it is not one.
func ParseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// SpecVersion is the CloudEvents version of the attributes.
const SpecVersion = "1.0"

// Attr is one CloudEvents context attribute, Name without the binding's
// prefix.
type Attr struct{ Name, Value string }

// CloudEvents returns the binary-mode attributes of a message: specversion,
// id, source, type (the topic) and, when created is set, time.
func CloudEvents(id, topic, source string, created time.Time) []Attr {
	a := []Attr{{"specversion", SpecVersion}, {"id", id}, {"source", source}, {"type", topic}}
	if !created.IsZero() {
		a = append(a, Attr{"time", Time(created)})
	}
	return a
}

// ContentTypeHeader is the canonical name of the content type header: the
// publishers send the producer's Content-Type header, whatever its
// spelling, under this name (Kafka's CloudEvents binding under its own,
// content-type).
const ContentTypeHeader = "Content-Type"

// IsContentType reports whether a header name is Content-Type in any case.
func IsContentType(name string) bool {
	return len(name) == len(ContentTypeHeader) && strings.EqualFold(name, ContentTypeHeader)
}

// ContentType returns the name and value of the Content-Type header in h,
// whatever its case ("" if none).
func ContentType(h map[string]string) (name, value string) {
	for k, v := range h {
		if IsContentType(k) {
			return k, v
		}
	}
	return "", ""
}

// HasPrefixFold reports whether name begins with prefix, an ASCII text,
// in any case.
func HasPrefixFold(name, prefix string) bool {
	return len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix)
}

// PercentEncode encodes a CloudEvents attribute value for a NATS header as
// the NATS protocol binding requires (3.1.3.2): every byte of a space, a
// double quote, a percent sign or a character outside printable ASCII
// (U+0021 to U+007E) as %XY, upper-case hex; the rest as it is. A value
// that needs none is returned as it is, without a copy.
func PercentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if percentEncoded(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; percentEncoded(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func percentEncoded(c byte) bool { return c <= ' ' || c == '"' || c == '%' || c >= 0x7f }

// String renders a header value a broker decoded as something other than
// a string (AMQP tables carry typed values): integers, floats and booleans
// as Go's strconv writes them, byte arrays that are UTF-8 as their text,
// times in Layout; ok is false for what has no single text form (tables,
// arrays, invalid UTF-8), which the subscribers drop.
func String(v any) (s string, ok bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), utf8.Valid(x)
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.Itoa(x), true
	case int8:
		return strconv.FormatInt(int64(x), 10), true
	case int16:
		return strconv.FormatInt(int64(x), 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case uint8:
		return strconv.FormatUint(uint64(x), 10), true
	case uint16:
		return strconv.FormatUint(uint64(x), 10), true
	case uint32:
		return strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case time.Time:
		return Time(x), true
	}
	return "", false
}
