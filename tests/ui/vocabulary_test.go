package ui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxui"
)

// TestVocabularyDashboard: every card and every column of the backlog and
// relay panels is labelled with a word of docs/reference/glossary.md: "oldest
// outstanding" beside "pending" (not "oldest pending" beside pending 0),
// "row versions to vacuum" for PostgreSQL's dead tuples (not "dead row
// versions" beside the dead messages), "went dead" for a relay's counter.
func TestVocabularyDashboard(t *testing.T) {
	t.Parallel()
	terms := testenv.GlossaryTerms(t)
	h, err := txboxui.New(txboxui.Config{
		Backlog: func(context.Context) (txboxui.Backlog, error) {
			return txboxui.Backlog{Parked: 4, Dead: 1, ParkedKeys: 1, OldestPendingAge: 9*time.Minute + 43*time.Second,
				Upkeep: &txboxui.Upkeep{OldestTransactionAge: time.Second, DeadRows: 7}}, nil
		},
		Relays: []txboxui.RelayRef{{Name: "relay", Current: func() *relay.Relay { return nil }}},
	})
	testenv.Must(t, err, "txboxui.New")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
	page := rec.Body.String()
	labels := regexp.MustCompile(`<span class="label">([^<]+)</span>`).FindAllStringSubmatch(page, -1)
	relays := page[strings.Index(page, `<section id="relays">`):]
	relays = relays[:strings.Index(relays, "</thead>")]
	cols := regexp.MustCompile(`<th class="n">([^<]+)</th>`).FindAllStringSubmatch(relays, -1)
	if len(labels) < 9 || len(cols) != 5 {
		t.Fatalf("%d card labels, %d relay counter columns; want at least 9 and 5:\n%s", len(labels), len(cols), page)
	}
	for _, m := range append(labels, cols...) {
		l := m[1]
		if l == "failed" || l == "rounds" { // the relay's rounds, not messages
			continue
		}
		if !testenv.GlossaryLabel(terms, l) {
			t.Errorf("the dashboard labels %q, which is not a word of docs/reference/glossary.md", l)
		}
	}
	for _, want := range []string{">oldest outstanding<", ">row versions to vacuum<", ">went dead<"} {
		if !strings.Contains(page, want) {
			t.Errorf("the dashboard lacks %q", want)
		}
	}
}
