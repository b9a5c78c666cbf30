package relay

import (
	"testing"
	"time"
)

// claimFrom: a claim from the table's start when there is no position, and
// at least every minFullScan during a drain; but a sweep of the backlog
// window by window (a claim cut short by its window) goes on to the end
// whatever the time, so that rows far behind a blocked stretch are reached.
func TestClaimFromSweepsToTheEnd(t *testing.T) {
	r := &Relay{cfg: Config{PollInterval: time.Second}}
	if got := r.claimFrom(); got != 0 {
		t.Fatalf("no position: from %d, want 0", got)
	}
	r.from.Store(5000)
	if got := r.claimFrom(); got != 5000 {
		t.Fatalf("a full scan just ran: from %d, want 5000", got)
	}
	past := time.Now().Add(-time.Minute).UnixNano()
	r.fullScan.Store(past)
	if got := r.claimFrom(); got != 0 {
		t.Fatalf("draining, the last full scan a minute ago: from %d, want 0", got)
	}
	r.fullScan.Store(past)
	r.more.Store(true)
	if got := r.claimFrom(); got != 5000 {
		t.Fatalf("sweeping window by window, the last full scan a minute ago: from %d, want 5000 (the sweep goes on)", got)
	}
	if r.fullScan.Load() != past {
		t.Fatal("a claim that goes on with a sweep counted as a full scan")
	}
}
