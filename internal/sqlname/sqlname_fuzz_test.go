package sqlname

import (
	"strings"
	"testing"

	"github.com/txbox/txbox/txboxdriver"
)

// FuzzValidate checks the identifier rule: an accepted name is 1 to MaxLen
// bytes of ASCII letters, digits and underscores, not starting with a
// digit; quoted in every dialect it is the name between the dialect's
// quotes, with no quote, dot, white space or NUL inside, so that it is one
// identifier wherever it is spliced; Derived keeps it within MaxLen.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		"txbox_outbox", "_x", "A1", "", "1abc", "a-b", "a.b", "a b", `a"b`, "a`b", "a;drop table x",
		"é", "a\x00", "a\n", "ＡＢ", "a\u200bb", strings.Repeat("a", MaxLen), strings.Repeat("a", MaxLen+1),
		"a\u212a", "ſ",
	} {
		f.Add(s, "outbox")
	}
	f.Fuzz(func(t *testing.T, name, suffix string) {
		if err := Validate("table", name); err != nil {
			if !strings.Contains(err.Error(), "table name") {
				t.Fatalf("the error does not say which name: %v", err)
			}
			return
		}
		if name == "" || len(name) > MaxLen || (name[0] >= '0' && name[0] <= '9') {
			t.Fatalf("accepted %q", name)
		}
		for i := 0; i < len(name); i++ {
			c := name[i]
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				t.Fatalf("accepted %q, with %q at byte %d", name, c, i)
			}
		}
		for _, d := range []txboxdriver.Dialect{txboxdriver.Postgres, txboxdriver.SQLite, txboxdriver.MySQL} {
			q := Quote(d, name)
			open := `"`
			if d == txboxdriver.MySQL {
				open = "`"
			}
			if q != open+name+open || strings.Count(q, open) != 2 {
				t.Fatalf("%s quotes %q as %s", d, name, q)
			}
			qq := Qualified(d, name, name)
			if qq != q+"."+q || strings.Count(qq, ".") != 1 {
				t.Fatalf("%s qualifies %q as %s", d, name, qq)
			}
		}
		if Validate("suffix", suffix) == nil && len(suffix) < MaxLen-1 {
			dn := Derived(name, suffix)
			if err := Validate("derived", dn); err != nil {
				t.Fatalf("Derived(%q, %q) = %q: %v", name, suffix, dn, err)
			}
		}
	})
}
