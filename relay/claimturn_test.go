package relay

import (
	"context"
	"testing"
)

// A relay's claims take turns; a claim whose turn does not end (a silent
// connection) holds the next one back only for claimTurnWait, and one whose
// context ends stops waiting.
func TestClaimsTakeTurns(t *testing.T) {
	r := &Relay{claimTurn: make(chan struct{}, 1)}
	ctx := context.Background()
	first := r.takeTurn(ctx)
	if len(r.claimTurn) != 1 {
		t.Fatal("the first claim did not take the turn")
	}
	// The turn is held and never given back: the next claim goes on.
	beside := r.takeTurn(ctx)
	beside() // a claim that went on beside the turn gives nothing back
	if len(r.claimTurn) != 1 {
		t.Fatal("a claim beside the turn ended the held turn")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	r.takeTurn(cancelled)()
	// Once the turn ends, the next claim takes it.
	first()
	if len(r.claimTurn) != 0 {
		t.Fatal("the turn was not given back")
	}
	next := r.takeTurn(ctx)
	if len(r.claimTurn) != 1 {
		t.Fatal("the next claim did not take the free turn")
	}
	next()
}
