// Package printable makes text read from a database fit to show in a
// terminal or a web page: characters that are not printable are escaped,
// so that a value can neither send escape sequences to a terminal, fake a
// row, nor reorder what is shown around it (bidi overrides such as U+202E).
package printable

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Cell returns s fit to print as one value of a table or a line: control
// characters (C0 with tab, CR and LF, DEL, C1), other runes that are not
// printable (strconv.IsPrint: format characters such as bidi overrides
// too), invalid UTF-8 and backslashes escaped as strconv.Quote escapes them,
// without the quotes.
func Cell(s string) string { return escape(s, false) }

// Text is Cell for a message of several lines, such as an error: it keeps
// line feeds and backslashes.
func Text(s string) string { return escape(s, true) }

func escape(s string, multiline bool) string {
	clean := func(r rune) bool {
		switch r {
		case '\n', '\\':
			return multiline
		case utf8.RuneError: // invalid UTF-8 (or a real U+FFFD, kept below)
			return false
		}
		return strconv.IsPrint(r)
	}
	i := strings.IndexFunc(s, func(r rune) bool { return !clean(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case clean(r), r == utf8.RuneError:
			b.WriteString(s[i : i+n]) // a real U+FFFD is printable
		case r == '\\':
			b.WriteString(`\\`)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
