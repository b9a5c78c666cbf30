package natsjs

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/txbox/txbox"
)

// TestCheckPrefix: the prefixes NewPublisher and the CLI refuse, with an
// error that names the value escaped and says why.
func TestCheckPrefix(t *testing.T) {
	for _, ok := range []string{"", "txbox.", "orders", "a.b.c.", "ünï.cödé.", "a-b_c:d."} {
		if err := CheckPrefix(ok); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", ok, err)
		}
	}
	for _, c := range []struct{ prefix, says string }{
		{".a", "empty token"},
		{"a..b", "empty token"},
		{"a..", "empty token"},
		{"..", "empty token"},
		{"orders.*.", "wildcards"},
		{"orders.>", "wildcards"},
		{"a*b.", "wildcards"},
		{"a b.", "' ' is not allowed"},
		{"a\tb.", `'\t' is not allowed`},
		{"a\x00b", `'\x00' is not allowed`},
		{"m\x1b[31m.", `'\x1b' is not allowed`},
		{"a\u00a0b.", `'\u00a0' is not allowed`}, // no-break space
		{"a\u200bb.", `'\u200b' is not allowed`}, // zero-width space
		{"rtl\u202e.", `'\u202e' is not allowed`},
		{"bad\xff.", "not valid UTF-8"},
		{strings.Repeat("p", 4500), "is 4500 bytes, over the limit of "},
	} {
		err := CheckPrefix(c.prefix)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("CheckPrefix(%q) = %v, want an error saying %q", c.prefix, err, c.says)
			continue
		}
		if !escaped(err.Error()) {
			t.Errorf("CheckPrefix(%q): error %q is not escaped", c.prefix, err)
		}
		if len(c.prefix) < 100 && !strings.HasPrefix(err.Error(), strconv.Quote(c.prefix)+": ") {
			t.Errorf("CheckPrefix(%q) = %v: want the value quoted first", c.prefix, err)
		}
		// NewPublisher refuses the same prefixes (but the long one, which
		// leaves room for short topics), before looking at the connection.
		if len(c.prefix) > 100 {
			continue
		}
		_, err = NewPublisher(nil, PublisherConfig{Prefix: c.prefix})
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "natsjs: Prefix "+CheckPrefix(c.prefix).Error()) {
			t.Errorf("NewPublisher(Prefix %q) = %v, want txbox.ErrInvalidConfig naming the Prefix", c.prefix, err)
		}
	}
	if limit := MaxPrefix(DefaultMaxControlLine); CheckPrefix(strings.Repeat("p", limit)) != nil || CheckPrefix(strings.Repeat("p", limit+1)) == nil {
		t.Errorf("CheckPrefix does not draw the line at MaxPrefix(DefaultMaxControlLine) = %d", limit)
	}
}

// TestCheckStreamNameAndSubject: the stream names and subjects EnsureStream
// and the CLI refuse.
func TestCheckStreamNameAndSubject(t *testing.T) {
	for _, ok := range []string{"TXBOX", "orders-1", "ORDERS_2", "ünï"} {
		if err := CheckStreamName(ok); err != nil {
			t.Errorf("CheckStreamName(%q) = %v", ok, err)
		}
	}
	for _, c := range []struct{ name, says string }{
		{"a b", "may not contain"},
		{"a.b", "may not contain"},
		{"a*", "may not contain"},
		{"a>", "may not contain"},
		{"a/b", "may not contain"},
		{`a\b`, "may not contain"},
		{"a\tb", "may not contain"},
		{"a\x00b", "may not contain"},
		{"a\u202eb", "may not contain"},
		{"a\xffb", "may not contain"},
		{strings.Repeat("S", MaxStreamName+1), "is 256 bytes, over NATS JetStream's limit of 255 bytes"},
	} {
		err := CheckStreamName(c.name)
		if err == nil || !strings.Contains(err.Error(), c.says) || !escaped(err.Error()) {
			t.Errorf("CheckStreamName(%q) = %v, want an escaped error saying %q", c.name, err, c.says)
			continue
		}
		_, err = EnsureStream(context.Background(), nil, StreamConfig{Name: c.name, Subjects: []string{"x.>"}})
		if !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("EnsureStream(Name %q) = %v, want txbox.ErrInvalidConfig", c.name, err)
		}
	}
	for _, ok := range []string{"orders.>", "a.*.c", "*", ">", "a"} {
		if err := CheckSubject(ok); err != nil {
			t.Errorf("CheckSubject(%q) = %v", ok, err)
		}
	}
	for _, c := range []struct{ subject, says string }{
		{"", "empty token"},
		{"a.", "empty token"},
		{".a", "empty token"},
		{"a..b", "empty token"},
		{"a.>.b", "'>' must be the last token"},
		{"a.b*", "must be whole tokens"},
		{"a.>x", "must be whole tokens"},
		{"a b", "' ' is not allowed"},
		{"a\nb", `'\n' is not allowed`},
		{"a\u200bb", `'\u200b' is not allowed`},
		{"\xff", "not valid UTF-8"},
	} {
		err := CheckSubject(c.subject)
		if err == nil || !strings.Contains(err.Error(), c.says) || !escaped(err.Error()) {
			t.Errorf("CheckSubject(%q) = %v, want an escaped error saying %q", c.subject, err, c.says)
			continue
		}
		_, err = EnsureStream(context.Background(), nil, StreamConfig{Name: "S", Subjects: []string{"ok.>", c.subject}})
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("EnsureStream(Subjects %q) = %v, want txbox.ErrInvalidConfig", c.subject, err)
		}
	}
	if _, err := EnsureStream(context.Background(), nil, StreamConfig{}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("EnsureStream(no Name) = %v, want txbox.ErrInvalidConfig", err)
	}
}

// escaped reports whether msg is valid UTF-8 with every rune printable.
func escaped(msg string) bool {
	return utf8.ValidString(msg) && strings.IndexFunc(msg, func(r rune) bool { return !strconv.IsPrint(r) }) < 0
}

// TestUncaptured: the subjects a stream's subjects leave out, wildcards on
// either side. tests/natsjs checks the rule against the NATS server's own.
func TestUncaptured(t *testing.T) {
	for _, c := range []struct {
		want, have, missing []string
	}{
		{[]string{"orders.>"}, []string{"orders.>"}, nil},
		{[]string{"orders.*", "orders.placed", "orders.a.b"}, []string{"orders.>"}, nil},
		{[]string{"orders.*"}, []string{"*.*"}, nil},
		{[]string{"orders.*"}, []string{"orders.placed"}, []string{"orders.*"}},
		{[]string{"orders.>"}, []string{"orders.*"}, []string{"orders.>"}},
		{[]string{"orders"}, []string{"orders.>"}, []string{"orders"}},
		{[]string{"billing.>", "orders.>", "audit"}, []string{"orders.>", ">"}, nil},
		{[]string{"billing.>", "orders.>", "audit"}, []string{"orders.>"}, []string{"billing.>", "audit"}},
		{[]string{"a.b"}, nil, []string{"a.b"}},
		{nil, []string{"a.>"}, nil},
	} {
		if got := Uncaptured(c.want, c.have); !slices.Equal(got, c.missing) {
			t.Errorf("Uncaptured(%q, %q) = %q, want %q", c.want, c.have, got, c.missing)
		}
	}
}
