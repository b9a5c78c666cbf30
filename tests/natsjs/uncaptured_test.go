package natsjs_test

import (
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/txbox/txbox/natsjs"
)

// FuzzUncaptured checks natsjs.Uncaptured, which decides without the NATS
// server which subjects a stream's subjects leave out, against the
// server's own rule (server.SubjectMatchesFilter), wildcards on either
// side, tokens empty or not.
func FuzzUncaptured(f *testing.F) {
	for _, c := range [][2]string{
		{"orders.*", "orders.>"}, {"orders.*", "*.*"}, {"orders.>", "orders.*"}, {"orders", "orders.>"},
		{"a.b.c", "a.*.c"}, {"a.*.c", "a.b.c"}, {">", ">"}, {"*", ">"}, {"a..b", "a.*.b"}, {"", ">"},
		{"a.>", "a.>.b"}, {"*a.b", "*.b"}, {">a", "*"}, {"a.b", "a.b.>"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, subject, filter string) {
		want := !server.SubjectMatchesFilter(subject, filter)
		got := slices.Equal(natsjs.Uncaptured([]string{subject}, []string{filter}), []string{subject})
		if got != want {
			t.Fatalf("Uncaptured([%q], [%q]) leaves it out: %v; the NATS server: %v", subject, filter, got, want)
		}
	})
}
