package txboxrabbitmq

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
	for _, ok := range []string{"", "txbox.", "orders", "a.b.c.", "ünï.cödé:", strings.Repeat("p", MaxRoutingKey-1)} {
		if err := CheckPrefix(ok); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", ok, err)
		}
	}
	for _, c := range []struct{ prefix, says string }{
		{".a", "empty token"},
		{"a..b", "empty token"},
		{"a..", "empty token"},
		{"orders.*.", "wildcards"},
		{"orders.>", "wildcards"},
		{"a b.", "' ' is not allowed"},
		{"a\tb.", `'\t' is not allowed`},
		{"a\x00b", `'\x00' is not allowed`},
		{"m\x1b[31m.", `'\x1b' is not allowed`},
		{"a\u00a0b.", `'\u00a0' is not allowed`},
		{"a\u200bb.", `'\u200b' is not allowed`},
		{"bad\xff.", "not valid UTF-8"},
		{strings.Repeat("p", MaxRoutingKey), "is 255 bytes, over the limit of 254 bytes: a RabbitMQ routing key"},
	} {
		err := CheckPrefix(c.prefix)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("CheckPrefix(%q) = %v, want an error saying %q", c.prefix, err, c.says)
			continue
		}
		for _, r := range err.Error() {
			if !strconv.IsPrint(r) {
				t.Errorf("CheckPrefix(%q): error %q is not escaped", c.prefix, err)
				break
			}
		}
		if len(c.prefix) < 100 && !strings.HasPrefix(err.Error(), strconv.Quote(c.prefix)+": ") {
			t.Errorf("CheckPrefix(%q) = %v: want the value quoted first", c.prefix, err)
		}
		_, err = NewPublisher(nil, PublisherConfig{Prefix: c.prefix})
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "rabbitmq: Prefix "+CheckPrefix(c.prefix).Error()) {
			t.Errorf("NewPublisher(Prefix %q) = %v, want txbox.ErrInvalidConfig naming the Prefix", c.prefix, err)
		}
	}
}

// TestCheckExchange: an exchange name over RabbitMQ's 255 bytes is refused
// by CheckExchange, NewPublisher and DeclareQueue, with the byte count.
func TestCheckExchange(t *testing.T) {
	for _, ok := range []string{"", "events", "ünï.cödé", strings.Repeat("x", MaxExchange)} {
		if err := CheckExchange(ok); err != nil {
			t.Errorf("CheckExchange(%d bytes) = %v, want nil", len(ok), err)
		}
	}
	long := strings.Repeat("x", MaxExchange+1)
	const want = "is 256 bytes, over RabbitMQ's limit of 255 bytes for an exchange name"
	if err := CheckExchange(long); err == nil || err.Error() != want {
		t.Fatalf("CheckExchange(256 bytes) = %v, want %q", err, want)
	}
	_, err := NewPublisher(nil, PublisherConfig{Exchange: long})
	if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "rabbitmq: Exchange "+want) {
		t.Errorf("NewPublisher(Exchange of 256 bytes) = %v, want txbox.ErrInvalidConfig naming the Exchange", err)
	}
	err = DeclareQueue(t.Context(), nil, QueueConfig{Name: "q", Exchange: long})
	if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "rabbitmq: Exchange "+want) {
		t.Errorf("DeclareQueue(Exchange of 256 bytes) = %v, want txbox.ErrInvalidConfig naming the Exchange", err)
	}
}
