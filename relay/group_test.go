package relay

import (
	"context"
	"errors"
	"testing"

	"github.com/txbox/txbox"
)

// A group's configuration is checked and defaulted; a store needs a name
// and a relay; Remove of an unknown store says so.
func TestGroupConfigAndStoreChecks(t *testing.T) {
	if _, err := NewGroup(GroupConfig{DatabaseBudget: -1}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("negative budget: got %v, want ErrInvalidConfig", err)
	}
	g, err := NewGroup(GroupConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if g.cfg.DatabaseBudget != DefaultDatabaseBudget || g.log == nil {
		t.Fatalf("defaults not applied: %+v", g.cfg)
	}
	ctx := context.Background()
	for _, s := range []Store{{Name: "a"}, {Relay: &Relay{}}} {
		if err := g.Add(ctx, s); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Fatalf("Add(%+v): got %v, want ErrInvalidConfig", s, err)
		}
	}
	if err := g.Remove(ctx, "nobody"); !errors.Is(err, ErrUnknownStore) {
		t.Fatalf("Remove of an unknown store: got %v, want ErrUnknownStore", err)
	}
	g.Wake("nobody") // ignored, never blocks
	if len(g.Names()) != 0 {
		t.Fatalf("names of an empty group: %v", g.Names())
	}
}
