package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/roundtimes"
)

// TestBreakdownSplitsTheClaim: a message committed before its round began
// spends its own claim behind the relay's previous claim, in the database
// round trip and in the pick, each as the relay recorded it.
func TestBreakdownSplitsTheClaim(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := newRounds()
	r.committed("m", at(0))
	r.RelayRound(roundtimes.Round{Start: at(1), Sent: at(3), Answered: at(10), Claimed: at(11), Publish: at(11), Acked: at(12), Finished: at(13), IDs: []string{"m"}})
	r.arrived("m", at(12))
	r.ping(2 * time.Millisecond)
	var b strings.Builder
	r.breakdown(&b)
	out := b.String()
	for _, want := range []string{
		"claim 10.00 ms (behind the previous claim 2.00, database round trip 7.00)",
		"round trip, mean / p50 / p99 ms: the claim's 7.00 / 7.00 / 7.00 (1); a SELECT 1 meanwhile on the writers' pool 2.00 / 2.00 / 2.00 (1)",
		"mean ms, all         12.00 =",
		"wait: no round 1.00 + own claim: behind the relay's previous claim 2.00 + own claim: database round trip 7.00 + own claim: pick 1.00",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("breakdown lacks %q:\n%s", want, out)
		}
	}
}

// TestBreakdownNamesTheSlowestClaims: the claims with the longest round
// trips are named, slowest first, with when in the run each was sent
// (from the first claim) and how many rows it held; the warm-up's, and
// those begun in it and ended after it, are not among them.
func TestBreakdownNamesTheSlowestClaims(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	round := func(start, trip int, ids ...string) roundtimes.Round {
		return roundtimes.Round{Start: at(start), Sent: at(start), Answered: at(start + trip), Claimed: at(start + trip),
			Publish: at(start + trip), Acked: at(start + trip + 1), Finished: at(start + trip + 2), IDs: ids}
	}
	r := newRounds()
	r.RelayRound(round(0, 300, "w")) // the warm-up's
	r.reset(at(900))
	r.RelayRound(round(100, 350, "v")) // begun in the warm-up, marked after it
	r.RelayRound(round(1000, 2, "a"))
	r.RelayRound(round(1500, 40, "b", "c"))
	r.RelayRound(round(2000, 5, "d"))
	for _, id := range []string{"a", "b", "c", "d"} {
		r.committed(id, at(900))
		r.arrived(id, at(2100))
	}
	var b strings.Builder
	r.breakdown(&b)
	want := "the slowest claims' round trips (from the run's first claim): 40.0 ms at +0.50 s (2 rows), 5.0 ms at +1.00 s (1 rows), 2.0 ms at +0.00 s (1 rows)"
	if !strings.Contains(b.String(), want) {
		t.Errorf("breakdown lacks %q:\n%s", want, b.String())
	}
}
