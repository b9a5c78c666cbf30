package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// scripted stands in for a store's rounds and its claim's starting point:
// each round says where its claim reads rows without a key from (0: the
// table's start, and every lane) on started, then ends as the test says.
type scripted struct {
	r       *Relay
	from    atomic.Int64
	started chan int64
	end     chan func() int
}

func newScripted(t *testing.T) *scripted {
	cfg, err := (&Config{PollInterval: time.Hour}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{cfg: cfg, log: cfg.Logger}
	r.check = func(context.Context, bool) ([]string, error) { return nil, nil }
	return &scripted{r: r, started: make(chan int64), end: make(chan func() int)}
}

func (s *scripted) round(ctx context.Context) (int, error) {
	select {
	case s.started <- s.from.Load():
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

// fromStart is the store's Relay.claimsFromStart.
func (s *scripted) fromStart() bool { return s.from.Load() == 0 }

// full ends a round as a claim that came full, in a backlog: the next
// claim reads rows without a key from past it (outboxsql.Lanes). empty
// ends one as a claim that found nothing: the next reads from the start.
func (s *scripted) full() int {
	s.from.Store(500)
	return s.r.cfg.BatchSize
}

func (s *scripted) empty() int {
	s.from.Store(0)
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
	m.round, m.fromStart = s.round, s.fromStart
	done := make(chan error, 1)
	go func() { done <- g.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, g, m
}

// A Wake that comes while a round of the store runs, or while its turn is
// queued, is followed by a round from the table's start that begins after
// it, even when the rounds in flight and queued go on with a backlog
// (whose claims read rows without a key from past the last batch, past
// rows the wake may be for); and a store waits for its poll interval only
// after such a round claimed nothing.
func TestWakeIsFollowedByAFullRound(t *testing.T) {
	t.Run("during a round from the start", func(t *testing.T) {
		s, g, m := ownScripted(t)
		if from := <-s.started; from != 0 {
			t.Fatalf("first round claims from %d", from)
		}
		s.r.Wake() // its claim came before
		s.end <- s.empty
		wantFullRound(t, g, m, s)
		s.end <- s.empty
	})

	t.Run("during a round that comes full", func(t *testing.T) {
		s, g, m := ownScripted(t)
		if from := <-s.started; from != 0 {
			t.Fatalf("first round claims from %d", from)
		}
		s.r.Wake() // while the round runs
		s.end <- s.full
		if from := <-s.started; from != 500 {
			t.Fatalf("second round claims from %d, want 500 (the backlog goes on)", from)
		}
		s.end <- s.empty
		wantFullRound(t, g, m, s)
		s.end <- s.empty
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
			g.stores[name].round, g.stores[name].fromStart = s.round, s.fromStart
		}
		done := make(chan error, 1)
		go func() { done <- g.run(ctx) }()
		defer func() { cancel(); <-done }()

		<-a.started // a's turn first; b waits for the budget
		a.end <- a.full
		<-b.started // a is queued behind b, its next round going on with the backlog
		g.Wake("a")
		b.end <- b.empty
		if from := <-a.started; from != 500 {
			t.Fatalf("a's queued round claims from %d, want 500 (the backlog goes on)", from)
		}
		a.end <- a.empty
		wantFullRound(t, g, g.stores["a"], a)
		a.end <- a.empty
	})

	t.Run("a backlog's end", func(t *testing.T) {
		// No wake: a claim in a backlog that finds nothing read only
		// past the last batch and a few lanes: the store looks from the
		// start once more before it waits.
		s, g, m := ownScripted(t)
		<-s.started
		s.end <- s.full
		<-s.started
		s.end <- s.empty
		wantFullRound(t, g, m, s)
		s.end <- s.empty
	})
}
