package natsjs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/dotname"
	"github.com/txbox/txbox/internal/printable"
)

// MaxStreamName is the longest JetStream stream name (the server's
// JSMaxNameLen).
const MaxStreamName = 255

// CheckPrefix checks a Prefix before connecting: dot-separated tokens,
// none empty, of printable characters other than spaces, with no wildcard
// ('*', '>'), and at most MaxPrefix(DefaultMaxControlLine) bytes, so that
// a server's default max_control_line holds every topic after it.
// NewPublisher refuses a Prefix that breaks the syntax, or leaves room for
// no topic within its MaxControlLine. The error reads after the name of
// the setting: `"a..b": empty token …` or `is 4500 bytes, over …`.
func CheckPrefix(prefix string) error {
	if limit := MaxPrefix(DefaultMaxControlLine); len(prefix) > limit {
		return dotname.TooLong(len(prefix), limit, fmt.Sprintf(
			"a NATS server reads a subject on a protocol line of at most %d bytes (its default max_control_line), which must also hold a topic of up to %d bytes",
			DefaultMaxControlLine, txbox.MaxTopicLen))
	}
	return dotname.Prefix(prefix)
}

// CheckSubject checks a subject a stream captures (StreamConfig.Subjects):
// dot-separated tokens, none empty, of printable characters other than
// spaces; the wildcards '*' and '>' only as whole tokens, '>' last. The
// error reads after a name, as CheckPrefix's.
func CheckSubject(subject string) error { return dotname.Subject(subject) }

// CheckStreamName checks a JetStream stream name: at most MaxStreamName
// bytes of printable characters, with no space, '.', '*', '>', '/' or
// '\'. The error reads after a name, as CheckPrefix's.
func CheckStreamName(name string) error {
	if len(name) > MaxStreamName {
		return fmt.Errorf("is %d bytes, over NATS JetStream's limit of %d bytes for a stream name", len(name), MaxStreamName)
	}
	if strings.ContainsAny(name, " \t.*>/\\") || printable.Cell(name) != name {
		return fmt.Errorf("%q: a stream name may not contain spaces, control characters, '.', '*', '>', '/' or '\\'", name)
	}
	return nil
}

// Uncaptured returns the subjects that none of captured captures, in the
// order given: what a stream with the subjects captured (its
// jetstream.StreamConfig.Subjects) would leave out. Either side may hold
// wildcards: "orders.*" is captured by "orders.>" and by "*.*", not by
// "orders.placed". EnsureStream uses a stream that exists as it is; a
// caller checks it with
//
//	s, err := natsjs.EnsureStream(ctx, nc, cfg)
//	…
//	missing := natsjs.Uncaptured(cfg.Subjects, s.CachedInfo().Config.Subjects)
//
// A message to a subject no stream captures is rejected by the broker.
func Uncaptured(subjects, captured []string) []string {
	var missing []string
	for _, s := range subjects {
		if !slices.ContainsFunc(captured, func(c string) bool { return subjectWithin(s, c) }) {
			missing = append(missing, s)
		}
	}
	return missing
}

// subjectWithin reports whether every subject subject matches (it may hold
// wildcards) is matched by filter, as the NATS server decides it
// (server.SubjectMatchesFilter).
func subjectWithin(subject, filter string) bool {
	tokens, test := strings.Split(subject, "."), strings.Split(filter, ".")
	for i, t2 := range test {
		switch {
		case i >= len(tokens), t2 == "":
			return false
		case t2 == ">":
			return true
		}
		switch t1 := tokens[i]; {
		case t1 == "" || t1 == ">":
			return false
		case t1 == "*":
			if t2 != "*" {
				return false
			}
		case t2 != "*" && t1 != t2:
			return false
		}
	}
	return len(tokens) == len(test)
}

// validate checks cfg's name and subjects.
func (cfg StreamConfig) validate() error {
	if cfg.Name == "" {
		return fmt.Errorf("%w: natsjs: stream Name is required", txbox.ErrInvalidConfig)
	}
	if err := CheckStreamName(cfg.Name); err != nil {
		return fmt.Errorf("%w: natsjs: stream Name %w", txbox.ErrInvalidConfig, err)
	}
	for _, s := range cfg.Subjects {
		if err := CheckSubject(s); err != nil {
			return fmt.Errorf("%w: natsjs: stream Subjects: %w", txbox.ErrInvalidConfig, err)
		}
	}
	return nil
}
