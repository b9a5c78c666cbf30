package relay

import (
	"context"
	"testing"
	"time"
)

// scripted stands in for a store's rounds: each round says where its claim
// starts (Relay.claimFrom) on started, then ends as the test says.
type scripted struct {
	r       *Relay
	started chan int64
	end     chan func() int
}

func newScripted(t *testing.T) *scripted {
	cfg, err := (&Config{PollInterval: time.Hour, CleanupInterval: time.Hour}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{cfg: cfg, log: cfg.Logger}
	r.check = func(context.Context, bool) ([]string, error) { return nil, nil }
	return &scripted{r: r, started: make(chan int64), end: make(chan func() int)}
}

func (s *scripted) round(ctx context.Context) (int, error) {
	select {
	case s.started <- s.r.claimFrom():
	case <-ctx.Done():
		return 0, nil
	}
	select {
	case end := <-s.end:
		return end(), nil
	case <-ctx.Done():
		return 0, nil
	}
}

// sweepOn ends a round as a claim that read its window and found nothing
// claimable, with pending rows beyond it: the next claim goes on from
// there. sweepEnd ends one as the window at the backlog's end.
func (s *scripted) sweepOn() int {
	s.r.from.Store(500)
	s.r.more.Store(true)
	return 0
}

func (s *scripted) sweepEnd() int {
	s.r.from.Store(0)
	s.r.more.Store(false)
	return 0
}

// wantFullRound waits until m's next round starts, and fails when m goes
// idle instead (its poll interval is an hour) or the round's claim does not
// start at the table's start.
func wantFullRound(t *testing.T, g *Group, m *member, s *scripted) {
	t.Helper()
	for {
		select {
		case from := <-s.started:
			if from != 0 {
				t.Fatalf("the round after the wake claims from %d, want the table's start", from)
			}
			return
		case <-time.After(time.Millisecond):
		}
		g.mu.Lock()
		idle := m.rounds == 0 && !m.queued && m.timer != nil
		g.mu.Unlock()
		if idle {
			t.Fatal("the store went idle for its poll interval without a round from the table's start (a lost wake)")
		}
	}
}

// ownScripted runs a scripted store as a Relay of its own.
func ownScripted(t *testing.T) (*scripted, *Group, *member) {
	s := newScripted(t)
	ctx, cancel := context.WithCancel(context.Background())
	g := s.r.ownGroup(ctx)
	m := g.stores[""]
	m.round = s.round
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, g, m
}

// A Wake that comes while a round of the store runs, or while its turn is
// queued, is followed by a round from the table's start that begins after
// it, even when the rounds in flight and queued go on with a sweep of the
// backlog window by window (which starts past rows the wake may be for);
// and a store waits for its poll interval only after such a round claimed
// nothing.
func TestWakeIsFollowedByAFullRound(t *testing.T) {
	t.Run("during a round from the start", func(t *testing.T) {
		s, g, m := ownScripted(t)
		if from := <-s.started; from != 0 {
			t.Fatalf("first round claims from %d", from)
		}
		s.r.Wake() // its claim came before
		s.end <- s.sweepEnd
		wantFullRound(t, g, m, s)
		s.end <- s.sweepEnd
	})

	t.Run("during a round that goes on with a sweep", func(t *testing.T) {
		s, g, m := ownScripted(t)
		if from := <-s.started; from != 0 {
			t.Fatalf("first round claims from %d", from)
		}
		s.r.Wake() // while the round runs
		s.end <- s.sweepOn
		if from := <-s.started; from != 500 {
			t.Fatalf("second round claims from %d, want 500 (the sweep goes on)", from)
		}
		s.end <- s.sweepEnd
		wantFullRound(t, g, m, s)
		s.end <- s.sweepEnd
	})

	t.Run("while queued", func(t *testing.T) {
		g, err := NewGroup(GroupConfig{DatabaseBudget: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		a, b := newScripted(t), newScripted(t)
		for name, s := range map[string]*scripted{"a": a, "b": b} {
			if err := g.Add(ctx, Store{Name: name, Database: "one", Relay: s.r}); err != nil {
				t.Fatal(err)
			}
			g.stores[name].round = s.round
		}
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		defer func() { cancel(); <-done }()

		<-a.started // a's turn first; b waits for the budget
		a.end <- a.sweepOn
		<-b.started // a is queued behind b, its next round going on with the sweep
		g.Wake("a")
		b.end <- b.sweepEnd
		if from := <-a.started; from != 500 {
			t.Fatalf("a's queued round claims from %d, want 500 (the sweep goes on)", from)
		}
		a.end <- a.sweepEnd
		wantFullRound(t, g, g.stores["a"], a)
		a.end <- a.sweepEnd
	})

	t.Run("a sweep's end", func(t *testing.T) {
		// No wake: a sweep from the table's start ends past rows that
		// became claimable meanwhile (a key's next row, once its head was
		// marked): the store looks from the start once more before it
		// waits.
		s, g, m := ownScripted(t)
		<-s.started
		s.end <- s.sweepOn
		<-s.started
		s.end <- s.sweepEnd
		wantFullRound(t, g, m, s)
		s.end <- s.sweepEnd
	})
}
