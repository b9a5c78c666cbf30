package txboxkafka

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/txbox/txbox"
)

// TestCheckPrefix: the prefixes NewPublisher and the CLI refuse, with an
// error that names the value escaped and says why.
func TestCheckPrefix(t *testing.T) {
	for _, ok := range []string{"", "txbox.", "orders", "a-b_c.D9", strings.Repeat("p", MaxTopic-1)} {
		if err := CheckPrefix(ok); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", ok, err)
		}
	}
	for _, c := range []struct{ prefix, says string }{
		{"a:b", `':' is not allowed in a Kafka topic`},
		{"a b", `' ' is not allowed`},
		{"a\tb", `'\t' is not allowed`},
		{"a\x00", `'\x00' is not allowed`},
		{"m\x1b[31m", `'\x1b' is not allowed`},
		{"ü.", `'ü' is not allowed`},
		{"a\u202e", `'\u202e' is not allowed`},
		{"a*", `'*' is not allowed`},
		{"a>", `'>' is not allowed`},
		{"a/b", `'/' is not allowed`},
		{"bad\xff", "not valid UTF-8"}, // not '\ufffd', which prints as a valid character
		{strings.Repeat("p", MaxTopic), "is 249 bytes, over the limit of 248 bytes: a Kafka topic name"},
	} {
		err := CheckPrefix(c.prefix)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("CheckPrefix(%q) = %v, want an error saying %q", c.prefix, err, c.says)
			continue
		}
		if msg := err.Error(); !utf8Printable(msg) {
			t.Errorf("CheckPrefix(%q): error %q is not escaped", c.prefix, msg)
		}
		if len(c.prefix) < 100 && !strings.HasPrefix(err.Error(), strconv.Quote(c.prefix)+": ") {
			t.Errorf("CheckPrefix(%q) = %v: want the value quoted first", c.prefix, err)
		}
		_, err = NewPublisher(nil, PublisherConfig{Prefix: c.prefix})
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "kafka: Prefix "+CheckPrefix(c.prefix).Error()) {
			t.Errorf("NewPublisher(Prefix %q) = %v, want txbox.ErrInvalidConfig naming the Prefix", c.prefix, err)
		}
	}
}

func utf8Printable(msg string) bool {
	for _, r := range msg {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}
