package kafka_test

import (
	"strings"
	"testing"
)

// windowViolations on made-up ledgers: one partition, each transaction a
// list of message ids (a letter per batch), in the order committed.
func TestWindowViolations(t *testing.T) {
	t.Parallel()
	ledger := func(txns ...string) []rec {
		var recs []rec
		for i, ids := range txns {
			for _, id := range strings.Fields(ids) {
				recs = append(recs, rec{id: id, offset: int64(len(recs)), pid: 1, epoch: int16(i)})
			}
		}
		return recs
	}
	for _, c := range []struct {
		name  string
		txns  []string
		kills int
		batch int
		want  string // "" or a part of the verdict
	}{
		// Rounds a and b in flight take turns: a marked, b not, the
		// relay killed; the next relay sends b's two transactions again.
		{"alternating rounds, one kill", []string{"a1", "b1", "a2", "b2", "a3", "b1 b2", "c1"}, 1, 2, ""},
		// b committed but reported failed (a commit cut short), sent
		// again at once; later a kill re-sends c.
		{"commit reported failed", []string{"a1", "b1", "b1", "c1", "c1"}, 1, 2, "2 runs"},
		// Half of a transaction comes again (the idempotent producer).
		{"part of a transaction", []string{"a1 a2", "a2"}, 1, 2, "1 of its 2 messages"},
		// Four batches of one message come again after one kill.
		{"more than in flight", []string{"a1", "b1", "c1", "d1", "a1 b1 c1 d1"}, 1, 1, "delivered again, over"},
	} {
		got := windowViolations(ledger(c.txns...), c.kills, c.batch)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
