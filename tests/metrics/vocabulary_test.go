package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxprom"
)

// TestVocabularyHelp: the metrics' help text uses the words of
// docs/reference/glossary.md: the backlog gauge names its states and their sum
// (outstanding), txbox_relay_dead_total counts messages that went dead
// (not "parked": a parked message is one waiting behind a dead one), and
// PostgreSQL's dead tuples are row versions to vacuum, not dead messages.
func TestVocabularyHelp(t *testing.T) {
	terms := testenv.GlossaryTerms(t)
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		txboxprom.New(txboxprom.Config{}).Describe(ch)
		close(ch)
	}()
	help := map[string]string{}
	for d := range ch {
		s := d.String() // Desc{fqName: "…", help: "…", …}
		name := s[strings.Index(s, `fqName: "`)+9:]
		name = name[:strings.Index(name, `"`)]
		h := s[strings.Index(s, `help: "`)+7:]
		help[name] = h[:strings.Index(h, `", `)]
	}
	for name, want := range map[string][]string{
		"txbox_relay_backlog":         {"pending", "retrying", "parked", "outstanding", "dead"},
		"txbox_relay_dead_total":      {"went dead"},
		"txbox_relay_invalid_total":   {"marked dead"},
		"txbox_relay_table_dead_rows": {"row versions to vacuum", "not dead messages"},
	} {
		h, ok := help[name]
		if !ok {
			t.Fatalf("no metric %s among %d", name, len(help))
		}
		for _, w := range want {
			if !strings.Contains(h, w) {
				t.Errorf("%s's help %q lacks %q", name, h, w)
			}
			if !terms[w] && w != "marked dead" && w != "not dead messages" {
				t.Errorf("%s's help says %q, which docs/reference/glossary.md does not define", name, w)
			}
		}
	}
	for name, h := range help {
		for _, old := range []string{"parked as dead", "parked dead", "dead row versions"} {
			if strings.Contains(h, old) {
				t.Errorf("%s's help says %q: %q", name, old, h)
			}
		}
	}
}
