package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

// gateDelivery is a delivery that only carries a message: the gate never
// settles anything.
type gateDelivery struct {
	txbox.Delivery
	id, key string
}

func (d *gateDelivery) Message() txbox.Received {
	return txbox.Received{Message: txbox.Message{ID: d.id, Key: d.key}}
}

// TestKeyGate: one delivery per key runs, the key's later ones queue in
// arrival order and come out one by one to the worker that finishes the
// key; other keys and unkeyed deliveries pass; the queue is bounded and a
// full gate waits until ctx ends; drain empties it.
func TestKeyGate(t *testing.T) {
	g := (&keyRegistry{}).open("h", 3)
	ctx := context.Background()
	admit := func(id, key string) bool {
		t.Helper()
		run, err := g.admit(ctx, &gateDelivery{id: id, key: key}, key)
		if err != nil {
			t.Fatalf("admit %s: %v", id, err)
		}
		return run
	}
	for _, c := range []struct {
		id, key string
		run     bool
	}{{"a1", "a", true}, {"a2", "a", false}, {"b1", "b", true}, {"a3", "a", false}, {"u1", "", true}, {"u2", "", true}, {"b2", "b", false}} {
		if got := admit(c.id, c.key); got != c.run {
			t.Fatalf("admit %s: run %v, want %v", c.id, got, c.run)
		}
	}
	// Three queued: the bound. A fourth waits, and gives up with ctx.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if run, err := g.admit(short, &gateDelivery{id: "a4", key: "a"}, "a"); run || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("admit into a full gate: run %v, err %v; want it to wait until ctx ends, then queue it", run, err)
	}
	var order []string
	for {
		d, ok := g.next("a")
		if !ok {
			break
		}
		order = append(order, d.Message().ID)
	}
	if fmt.Sprint(order) != "[a2 a3 a4]" {
		t.Fatalf("key a's queue gave %v, want [a2 a3 a4]", order)
	}
	if !admit("a5", "a") { // a is idle again
		t.Fatal("a delivery of an idle key was queued")
	}
	left := g.drain()
	if len(left) != 1 || left[0].Message().ID != "b2" {
		t.Fatalf("drain gave %v, want b2", left)
	}
	if len(g.slots) != 0 {
		t.Fatalf("%d slots still taken after drain", len(g.slots))
	}
}

// TestParking: park, the parked error, listing and release.
func TestParking(t *testing.T) {
	c := &Consumer[struct{}]{}
	g := c.keys.open("h", 2)
	if g.parkedBy("k") != nil {
		t.Fatal("an unparked key reported parked")
	}
	g.park("k", "m1", errors.New("poison"))
	perr := g.parkedBy("k")
	if perr == nil || !errors.Is(perr, ErrKeyParked) || perr.By != "m1" {
		t.Fatalf("parkedBy: %v", perr)
	}
	pk := c.ParkedKeys()
	if len(pk) != 1 || pk[0].Key != "k" || pk[0].MessageID != "m1" || pk[0].Cause != "poison" || pk[0].DeadLettered != 1 {
		t.Fatalf("ParkedKeys %+v", pk)
	}
	if n := c.keys.parkedCount(); n != 1 {
		t.Fatalf("parkedCount %d, want 1", n)
	}
	c.log = nopLogger()
	if err := c.ReleaseKey("other", "k"); !errors.Is(err, ErrNotParked) {
		t.Fatalf("ReleaseKey of another handler: %v", err)
	}
	if err := c.ReleaseKey("h", "k"); err != nil {
		t.Fatalf("ReleaseKey: %v", err)
	}
	if g.parkedBy("k") != nil || len(c.ParkedKeys()) != 0 {
		t.Fatal("still parked after ReleaseKey")
	}
}

func TestCheckOrdered(t *testing.T) {
	for _, c := range []struct {
		h    HandlerConfig
		want bool
	}{
		{HandlerConfig{}, true},
		{HandlerConfig{Ordered: true}, true},
		{HandlerConfig{Ordered: true, DeadKey: ContinueKey}, true},
		{HandlerConfig{DeadKey: ContinueKey}, false},
		{HandlerConfig{Ordered: true, DeadKey: 7}, false},
	} {
		if ok := checkOrdered(c.h) == ""; ok != c.want {
			t.Errorf("checkOrdered(%+v) = %q", c.h, checkOrdered(c.h))
		}
	}
}

func nopLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestCheckOrderedRoutes: an Ordered handler must have its binding to
// itself, with no Route; unordered handlers may share bindings.
func TestCheckOrderedRoutes(t *testing.T) {
	h := func(name, binding string, ordered bool, r Route) *handler[int] {
		return &handler[int]{HandlerConfig: HandlerConfig{Name: name, Binding: binding, Ordered: ordered, Route: r}, route: r}
	}
	if p := checkOrderedRoutes([]*handler[int]{h("a", "b1", true, Route{}), h("x", "b2", false, Route{Topic: "t"}), h("y", "b2", false, Route{})}); len(p) != 0 {
		t.Fatalf("sound handlers: %q", p)
	}
	p := checkOrderedRoutes([]*handler[int]{h("a", "b1", true, Route{}), h("c", "b1", false, Route{Topic: "t"}), h("d", "b3", true, Route{Topic: "t"})})
	if len(p) != 2 {
		t.Fatalf("want 2 problems, got %q", p)
	}
	b := &binding[int]{name: "b1", routes: []*handler[int]{h("a", "b1", true, Route{})}}
	b.single = b.routes[0]
	if !b.ordered() {
		t.Fatal("the binding of a lone Ordered handler is not ordered")
	}
	c := &Consumer[int]{}
	if size, _ := c.bindingBatching(b); size != 1 {
		t.Fatalf("an Ordered binding batches %d", size)
	}
}

// TestKeyGateSetAside: a failing head (held, waiting for a retry) is set
// aside only when the window (the gate's limit of unsettled deliveries) has
// been full with nothing admitted for the hold limit and the head has held
// its key that long; of several, the one with the most of its key queued
// behind it goes first, with a *KeyHeldError naming its failure; of
// several failing keys, none while nothing has succeeded since they began
// (an outage); a head that is not held (a database failure, or running)
// never is.
func TestKeyGateSetAside(t *testing.T) {
	const limit = 5 * time.Second
	g := (&keyRegistry{}).open("h", 4)
	ctx := context.Background()
	for _, c := range []struct{ id, key string }{{"a1", "a"}, {"a2", "a"}, {"a3", "a"}, {"b1", "b"}} {
		if _, err := g.admit(ctx, &gateDelivery{id: c.id, key: c.key}, c.key); err != nil {
			t.Fatalf("admit %s: %v", c.id, err)
		}
	}
	start := time.Now()
	head := func(key string, since time.Time) *heldDelivery {
		hd := &heldDelivery{key: key, since: since, err: errors.New(key + " fails"), setAside: make(chan struct{})}
		g.hold(hd)
		return hd
	}
	b := head("b", start.Add(-time.Minute)) // held longest, nothing queued
	a := head("a", start)                   // a2, a3 queued behind it
	if hd := g.setAsideDue(start.Add(limit/2), limit); hd != nil {
		t.Fatalf("set aside %q before the window was full for the hold limit", hd.key)
	}
	g.settled() // 3 of 4 unsettled: not full
	if hd := g.setAsideDue(start.Add(time.Hour), limit); hd != nil {
		t.Fatalf("set aside %q with room in the window", hd.key)
	}
	if _, err := g.admit(ctx, &gateDelivery{id: "c1", key: "c"}, "c"); err != nil {
		t.Fatal(err)
	}
	// Both keys failing, nothing succeeding since they began: an outage
	// shared by the window, not a key's own failure.
	if hd := g.setAsideDue(time.Now().Add(limit), limit); hd != nil {
		t.Fatalf("set aside %q while every held key failed and nothing succeeded", hd.key)
	}
	g.success()
	now := time.Now().Add(limit)
	hd := g.setAsideDue(now, limit)
	if hd != a {
		t.Fatalf("set aside %+v, want a's head (the most queued behind it)", hd)
	}
	select {
	case <-a.setAside:
	default:
		t.Fatal("a's retry wait not ended")
	}
	var held *KeyHeldError
	if !errors.As(a.aside, &held) || !errors.Is(a.aside, ErrKeyHeld) || held.Queued != 2 || held.Window != 4 || held.Err.Error() != "a fails" {
		t.Fatalf("aside %+v: want a *KeyHeldError with 2 queued, window 4, a's failure", a.aside)
	}
	if hd := g.setAsideDue(now.Add(limit/2), limit); hd != nil {
		t.Fatalf("set aside %q again before the window stayed full for the hold limit", hd.key)
	}
	if hd := g.setAsideDue(now.Add(limit), limit); hd != b {
		t.Fatalf("set aside %+v, want b's head next", hd)
	}
	g.unhold(b)
	if hd := g.setAsideDue(now.Add(time.Hour), limit); hd != nil {
		t.Fatalf("set aside %q: no head is held", hd.key)
	}
}
