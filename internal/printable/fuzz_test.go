package printable

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEscape checks Cell and Text, through which the CLI and the dashboard
// show values from the database: their output is valid UTF-8 and holds no
// control character (C0, DEL, C1) and no other rune strconv.IsPrint refuses
// (bidi overrides), but for Text's line feeds; Cell's output reads back, as
// a Go string literal, as the value it escapes, so that two values never
// print alike.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{
		"", "plain", "m\x1b]0;evil\x07", "order\r\n9\tfake-id\tfake.topic",
		"K\tL\u009b31m\u202e", "boom\r\n10  fake  row\x7f", "bad\xff\xfeutf8",
		`back\slash`, "\ufffd", "\xef\xbf\xbd\xef\xbf", "quote\"'`", "\u00a0nbsp", "\u2028\u2029",
		"\xed\xa0\x80", "\xf4\x90\x80\x80", "e\u0301", "\U0001F600", "\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, multiline := range []bool{false, true} {
			out := escape(s, multiline)
			if !utf8.ValidString(out) {
				t.Fatalf("escape(%q, %v) = %q: invalid UTF-8", s, multiline, out)
			}
			for _, r := range out {
				if r == '\n' && multiline {
					continue
				}
				if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r != utf8.RuneError && !strconv.IsPrint(r)) {
					t.Fatalf("escape(%q, %v) = %q holds %U", s, multiline, out, r)
				}
			}
		}
		out := Cell(s)
		back, err := strconv.Unquote(`"` + strings.ReplaceAll(out, `"`, `\"`) + `"`)
		if err != nil || back != s {
			t.Fatalf("Cell(%q) = %q reads back as %q (%v)", s, out, back, err)
		}
	})
}
