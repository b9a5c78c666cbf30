package txboxkafka

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

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

// TestCheckTransactionalID: the transactional ids CheckTransactionalID,
// NewPublisher and the CLI refuse, with an error that says why and quotes
// the id escaped.
func TestCheckTransactionalID(t *testing.T) {
	for _, ok := range []string{"relay-0", "orders relay 1", "ünï:cödé/1", strings.Repeat("r", MaxTransactionalID)} {
		if err := CheckTransactionalID(ok); err != nil {
			t.Errorf("CheckTransactionalID(%q) = %v, want nil", ok, err)
		}
	}
	for _, c := range []struct{ id, says string }{
		{"", "is empty"},
		{" relay-0", `" relay-0": want printable characters, with no space at either end`},
		{"relay-0\t", `"relay-0\t": want printable characters`},
		{"relay\n0", `"relay\n0": want printable characters`},
		{"m\x1b[31m", `"m\x1b[31m": want printable characters`},
		{"a\u202eb", `"a\u202eb": want printable characters`},
		{"bad\xff", `"bad\xff": want printable characters`},
		{strings.Repeat("r", MaxTransactionalID+1), "is 250 bytes, over the limit of 249 bytes"},
	} {
		err := CheckTransactionalID(c.id)
		if err == nil || !strings.HasPrefix(err.Error(), c.says) {
			t.Errorf("CheckTransactionalID(%q) = %v, want an error beginning %q", c.id, err, c.says)
			continue
		}
		if !utf8Printable(err.Error()) {
			t.Errorf("CheckTransactionalID(%q): error %q is not escaped", c.id, err)
		}
		if c.id == "" {
			continue // kgo.TransactionalID("") is refused by NewPublisher with its own error
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.TransactionalID(c.id))
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewPublisher(cl, PublisherConfig{})
		cl.Close()
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "kafka: the client's transactional id "+c.says) {
			t.Errorf("NewPublisher(transactional id %q) = %v, want txbox.ErrInvalidConfig naming the id", c.id, err)
		}
	}
}
