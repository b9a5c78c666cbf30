package relay

import (
	"context"
	"testing"
	"time"
)

// piped stands in for a store's rounds: each round hands the test a step
// on started, claims as many rows as the test sends on its claim (telling
// the relay, as Relay.claim does), and ends once the test closes its end.
type piped struct {
	r       *Relay
	started chan step
}

type step struct {
	claim chan int
	end   chan struct{}
}

func (p *piped) round(ctx context.Context) (int, error) {
	st := step{claim: make(chan int), end: make(chan struct{})}
	select {
	case p.started <- st:
	case <-ctx.Done():
		return 0, nil
	}
	var n int
	select {
	case n = <-st.claim:
	case <-ctx.Done():
		return 0, nil
	}
	p.r.claimed(n)
	select {
	case <-st.end:
	case <-ctx.Done():
	}
	return n, nil
}

// ownPiped runs a piped store as a Relay of its own.
func ownPiped(t *testing.T) (*piped, *Group, *member) {
	s := newScripted(t)
	s.r.onClaim = make(chan struct{}, 1)
	p := &piped{r: s.r, started: make(chan step)}
	ctx, cancel := context.WithCancel(context.Background())
	g := s.r.ownGroup(ctx)
	m := g.stores[""]
	m.round, m.fromStart = p.round, func() bool { return true }
	done := make(chan error, 1)
	go func() { done <- g.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, g, m
}

// nextRound waits for the store's next round to start. Nothing else
// happens meanwhile, so the wait is bounded: a round that does not start
// within it is not coming.
func (p *piped) nextRound(t *testing.T, why string) step {
	t.Helper()
	select {
	case st := <-p.started:
		return st
	case <-time.After(10 * time.Second):
		t.Fatalf("no round started: %s", why)
		return step{}
	}
}

// settled waits until m has rounds rounds in flight, and returns whether
// m is queued for another then, or another round started meanwhile.
func (p *piped) settled(g *Group, m *member, rounds int) (more bool) {
	for {
		g.mu.Lock()
		n, q := m.rounds, m.queued
		g.mu.Unlock()
		if n == rounds {
			return q
		}
		select {
		case st := <-p.started:
			st.claim <- 0
			close(st.end)
			return true
		case <-time.After(time.Millisecond):
		}
	}
}

// A round whose claim found rows is joined at once by a second round,
// whose claim overlaps the first's publish and marks, even when the batch
// was not full; one that finds nothing beside it leaves the next turn to
// the round in flight (no claims in a loop while a publish waits); and
// the store goes idle after a round alone that found nothing.
func TestRoundsOverlapWhileClaimsFindRows(t *testing.T) {
	p, g, m := ownPiped(t)
	first := p.nextRound(t, "the first")
	first.claim <- 3 // of a batch of 100
	second := p.nextRound(t, "a second beside a round whose claim found rows")
	second.claim <- 0
	close(second.end)
	if p.settled(g, m, 1) {
		t.Fatal("a round that found nothing beside a round in flight queued the store again, or started another")
	}
	close(first.end)
	third := p.nextRound(t, "the one after the round that claimed rows")
	third.claim <- 0
	close(third.end)
	for {
		g.mu.Lock()
		idle := m.rounds == 0 && !m.queued && m.timer != nil
		g.mu.Unlock()
		if idle {
			return
		}
		select {
		case st := <-p.started:
			close(st.end)
			t.Fatal("a round started after a round alone found nothing")
		case <-time.After(time.Millisecond):
		}
	}
}

// While claims find rows, full batches or not, three rounds run at once:
// the third claims while the first is still marked, so a row committed
// meanwhile does not wait for that round's end; no fourth.
func TestThreeRoundsWhileClaimsFindRows(t *testing.T) {
	p, g, m := ownPiped(t)
	var steps []step
	for i := range 3 {
		st := p.nextRound(t, "rounds side by side while claims find rows (batches of 3 of 100)")
		steps = append(steps, st)
		if i < 2 {
			st.claim <- 3
		}
	}
	steps[2].claim <- 3
	if p.settled(g, m, 3) {
		t.Fatal("a fourth round was queued beside three")
	}
	for _, st := range steps {
		close(st.end)
	}
	p.idle(t, g, m)
}

// While batches come full, three rounds run at once: one claims while
// one publishes and one is marked; no fourth.
func TestThreeRoundsWhileBatchesComeFull(t *testing.T) {
	p, g, m := ownPiped(t)
	full := p.r.cfg.BatchSize
	var steps []step
	for i := range 3 {
		st := p.nextRound(t, "rounds side by side while batches come full")
		steps = append(steps, st)
		if i < 2 {
			st.claim <- full
		}
	}
	steps[2].claim <- full
	if p.settled(g, m, 3) {
		t.Fatal("a fourth round was queued beside three")
	}
	for _, st := range steps {
		close(st.end)
	}
	p.idle(t, g, m) // the backlog ends
}

// idle ends every round the store starts with nothing claimed, until it
// waits for its poll interval.
func (p *piped) idle(t *testing.T, g *Group, m *member) {
	for {
		g.mu.Lock()
		idle := m.rounds == 0 && !m.queued && m.timer != nil
		g.mu.Unlock()
		if idle {
			return
		}
		select {
		case st := <-p.started:
			st.claim <- 0
			close(st.end)
		case <-time.After(time.Millisecond):
		}
	}
}
