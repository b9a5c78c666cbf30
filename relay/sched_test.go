package relay

import (
	"context"
	"testing"
)

// scriptedGroup runs a Group of the named scripted stores on one
// database of the given budget; the stores are queued in name order,
// those of armed with their doorbells armed (idle: their rows ring).
func scriptedGroup(t *testing.T, budget int, armed []string, names ...string) (*Group, map[string]*scripted) {
	g, err := NewGroup(GroupConfig{DatabaseBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ss := map[string]*scripted{}
	for _, name := range names {
		s := newScripted(t)
		ss[name] = s
		if err := g.Add(ctx, Store{Name: name, Database: "one", Relay: s.r}); err != nil {
			t.Fatal(err)
		}
		g.stores[name].round, g.stores[name].fromStart = s.round, s.fromStart
	}
	for _, name := range armed {
		g.stores[name].armed = true
	}
	done := make(chan error, 1)
	go func() { done <- g.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return g, ss
}

// The looks of idle stores (rounds of stores whose doorbell is armed)
// leave a unit of the budget to a store with work, which passes them in
// the queue: with a budget of 2 and one look running, the store with
// work, queued behind two more looks, starts before them.
func TestLooksLeaveTheBudgetToAStoreWithWork(t *testing.T) {
	t.Parallel()
	_, ss := scriptedGroup(t, 2, []string{"a", "b", "c"}, "a", "b", "c", "work")
	<-ss["a"].started
	select {
	case <-ss["work"].started:
	case <-ss["b"].started:
		t.Fatal("a second look took the budget's last unit ahead of the store with work")
	}
}

// A store woken from idle goes to the front of the queue: with a budget
// of 1 held by a, the woken store c starts before b, queued before it.
func TestAWokenStoreGoesFirst(t *testing.T) {
	t.Parallel()
	g, ss := scriptedGroup(t, 1, nil, "a", "b", "c")
	<-ss["a"].started
	ss["a"].end <- ss["a"].empty // a goes idle for its poll interval (an hour)
	<-ss["b"].started
	ss["b"].end <- ss["b"].empty
	<-ss["c"].started
	ss["c"].end <- ss["c"].empty // all three idle
	g.Wake("a")
	<-ss["a"].started // a holds the budget
	g.Wake("b")
	g.Wake("c")
	ss["a"].end <- ss["a"].empty
	select {
	case <-ss["c"].started:
	case <-ss["b"].started:
		t.Fatal("b, woken first, started before c: a woken store waits behind those queued before it")
	}
}
