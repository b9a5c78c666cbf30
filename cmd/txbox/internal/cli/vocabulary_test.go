package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// TestVocabularyStatsLine: the relay's stats line uses the words of
// docs/reference/glossary.md: "outstanding" for the rows still to deliver (parked
// ones among them), "dead" for the table's dead messages, "went dead" for
// this relay's counter; never "pending" for a sum that holds parked rows.
func TestVocabularyStatsLine(t *testing.T) {
	terms := testenv.GlossaryTerms(t)
	st := relay.Stats{Published: 10, Rejected: 1, Dead: 1, Pending: 4, Parked: 4, DeadRows: 1, OldestPendingAge: 9*time.Minute + 43*time.Second, Rounds: 12}
	got := statsLine(st, 2)
	const want = "relay: published 10 (+2), rejected 1, went dead 1; outstanding 4 (parked 4, oldest 9m43s), dead 1; rounds 12 (failed 0)"
	if got != want {
		t.Fatalf("stats line\n got %q\nwant %q", got, want)
	}
	for _, w := range []string{"published", "rejected", "went dead", "outstanding", "parked", "dead"} {
		if !terms[w] {
			t.Errorf("the stats line says %q, which docs/reference/glossary.md does not define", w)
		}
	}
	if strings.Contains(got, "pending") {
		t.Errorf("the stats line says pending for rows that are not all pending: %q", got)
	}
}

// TestVocabularyStats: every label of txbox stats is a word of
// docs/reference/glossary.md, and the counts are those its words define.
func TestVocabularyStats(t *testing.T) {
	terms := testenv.GlossaryTerms(t)
	b := inspect.Backlog{Pending: 0, Retrying: 1, Parked: 4, Dead: 1, ParkedKeys: 1, OldestPendingAge: 9*time.Minute + 43*time.Second, OldestClaimableAge: time.Second}
	tbl := inspect.Table{Size: 1 << 20, LiveRows: 10, DeadRows: 7}
	var out bytes.Buffer
	if err := printBacklog(&out, b, tbl, nil, throughput{delivered: 5, dead: 1, ok: true}, false); err != nil {
		t.Fatal(err)
	}
	label := regexp.MustCompile(`^(.*?)\s{2,}`)
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		m := label.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("a stats line without a label: %q", line)
		}
		if !testenv.GlossaryLabel(terms, m[1]) {
			t.Errorf("txbox stats labels a line %q, which is not a word of docs/reference/glossary.md: %q", m[1], line)
		}
	}
	for _, want := range []string{"outstanding", "5", "undelivered", "6", "oldest outstanding age", "9m43s", "row versions", "7 to vacuum"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("txbox stats lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "oldest pending") || strings.Contains(out.String(), "7 dead") {
		t.Errorf("txbox stats uses the old words:\n%s", out.String())
	}
}
