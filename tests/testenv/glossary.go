package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// docs/reference/glossary.md holds the words every output of txbox uses; the tests
// of the outputs check their labels against it.

var glossaryTerm = regexp.MustCompile(`(?m)^- \*\*([^*]+)\*\*`)

// GlossaryTerms returns the terms docs/reference/glossary.md defines (each
// "- **term**" line), lower-cased, with the terms that a term's line
// defines besides ("also called a **dead message**").
func GlossaryTerms(t testing.TB) map[string]bool {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "reference", "glossary.md"))
	Must(t, err, "read docs/reference/glossary.md")
	out := map[string]bool{}
	for _, m := range glossaryTerm.FindAllStringSubmatch(string(b), -1) {
		out[strings.ToLower(m[1])] = true
	}
	for _, m := range regexp.MustCompile(`\*\*([^*]+)\*\*`).FindAllStringSubmatch(string(b), -1) {
		out[strings.ToLower(m[1])] = true
	}
	return out
}

// GlossaryLabel reports whether label is in the glossary's words: a term, a term
// without its " age" ("oldest claimable" for "oldest claimable age"), or
// "TERM last minute".
func GlossaryLabel(terms map[string]bool, label string) bool {
	l := strings.ToLower(strings.TrimSpace(label))
	if terms[l] || terms[l+" age"] {
		return true
	}
	if rest, ok := strings.CutSuffix(l, " last minute"); ok {
		return terms[rest]
	}
	return false
}
