// Package dotname checks dot-separated names: NATS subjects, and the
// prefixes the broker adapters put before topics to form a subject, a
// routing key or a stream name. Errors read after the setting's name and
// quote the value escaped.
package dotname

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Subject checks a NATS subject: dot-separated tokens, none empty, of
// printable characters other than spaces; wildcards '*' and '>' only as
// whole tokens, '>' last.
func Subject(s string) error {
	if err := check(s, false); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	return nil
}

// Prefix checks the start of a name that a topic ends: as Subject, but it
// may end in '.', may be empty, and holds no wildcard.
func Prefix(s string) error {
	if s == "" {
		return nil
	}
	if err := check(s, true); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	return nil
}

func check(s string, prefix bool) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("not valid UTF-8")
	}
	tokens := strings.Split(s, ".")
	if prefix && strings.HasSuffix(s, ".") {
		tokens = tokens[:len(tokens)-1]
	}
	for i, tok := range tokens {
		if tok == "" {
			return fmt.Errorf("empty token (a leading, trailing or doubled '.')")
		}
		if i := strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }); i >= 0 {
			return fmt.Errorf("%q is not allowed in a subject", []rune(tok[i:])[0])
		}
		wild := strings.ContainsAny(tok, "*>")
		switch {
		case wild && prefix:
			return fmt.Errorf("wildcards '*' and '>' are not allowed in a prefix")
		case wild && tok != "*" && tok != ">":
			return fmt.Errorf("token %q: '*' and '>' must be whole tokens", tok)
		case tok == ">" && i != len(tokens)-1:
			return fmt.Errorf("'>' must be the last token")
		}
	}
	return nil
}

// TooLong is the error for a value of n bytes over limit bytes, why
// saying which limit.
func TooLong(n, limit int, why string) error {
	return fmt.Errorf("is %d bytes, over the limit of %d bytes: %s", n, limit, why)
}
