package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
)

func TestHandleBatch(t *testing.T) {
	t.Parallel()
	onEach(t, 4, testHandleBatch, testHandleBatch)
}

// One batch: a fresh message, a failing one followed by its copy (which
// runs, the first copy's receipt being gone), a copy of the first (a
// duplicate), a message handled before (a duplicate) and an invalid id.
// Each item gets its own outcome; one commit keeps exactly the effects and
// receipts of the successes.
func testHandleBatch[TTx any](t *testing.T, e *env[TTx]) {
	ctx := context.Background()
	ib := e.newInbox(t, inbox.Config{})
	bump := func(id string) func(context.Context, TTx) error {
		return func(ctx context.Context, tx TTx) error { return e.bump(ctx, tx, id) }
	}
	if res, err := ib.Handle(ctx, src, "c", nil, bump("c")); err != nil || res != inbox.Fresh {
		t.Fatalf("Handle c = %v, %v", res, err)
	}
	boom := errors.New("boom")
	failing := func(ctx context.Context, tx TTx) error {
		if err := e.bump(ctx, tx, "b"); err != nil { // rolled back with its savepoint
			return err
		}
		return boom
	}
	res, err := ib.HandleBatch(ctx, []inbox.Item[TTx]{
		{Source: src, ID: "a", Fn: bump("a")},
		{Source: src, ID: "b", Fn: failing},
		{Source: src, ID: "b", Fn: bump("b")},
		{Source: src, ID: "a", Fn: bump("a")},
		{Source: src, ID: "c", Fn: bump("c")},
		{Source: src, ID: "", Fn: bump("x")},
	}, nil)
	testenv.Must(t, err, "HandleBatch")
	want := []inbox.Result{inbox.Fresh, inbox.Failed, inbox.Fresh, inbox.Duplicate, inbox.Duplicate, inbox.Failed}
	for i, r := range res {
		if r.Result != want[i] {
			t.Errorf("item %d: %v (%v), want %v", i, r.Result, r.Err, want[i])
		}
	}
	var herr *inbox.HandlerError
	if !errors.As(res[1].Err, &herr) || !errors.Is(res[1].Err, boom) {
		t.Errorf("item 1: err %v, want a HandlerError wrapping boom", res[1].Err)
	}
	if !errors.Is(res[5].Err, inbox.ErrInvalidInput) {
		t.Errorf("item 5: err %v, want an InputError", res[5].Err)
	}
	for id, n := range map[string]int64{"a": 1, "b": 1, "c": 1, "x": 0} {
		if got := e.counter(t, id); got != n {
			t.Errorf("counter %s = %d, want %d", id, got, n)
		}
	}
	if n := e.inboxRows(t); n != 3 {
		t.Fatalf("%d receipts, want 3 (a, b, c)", n)
	}
}

func TestHandleBatchPanic(t *testing.T) {
	t.Parallel()
	onEach(t, 4, testHandleBatchPanic, testHandleBatchPanic)
}

// A panic in one handler of a batch propagates and rolls the whole
// transaction back: nothing of the batch is kept.
func testHandleBatchPanic[TTx any](t *testing.T, e *env[TTx]) {
	ctx := context.Background()
	ib := e.newInbox(t, inbox.Config{})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not propagate")
			}
		}()
		_, _ = ib.HandleBatch(ctx, []inbox.Item[TTx]{
			{Source: src, ID: "a", Fn: func(ctx context.Context, tx TTx) error { return e.bump(ctx, tx, "a") }},
			{Source: src, ID: "p", Fn: func(context.Context, TTx) error { panic("boom") }},
		}, nil)
	}()
	if n := e.inboxRows(t); n != 0 || e.counter(t, "a") != 0 {
		t.Fatalf("%d receipts, counter a %d after a panic: want nothing kept", n, e.counter(t, "a"))
	}
}
