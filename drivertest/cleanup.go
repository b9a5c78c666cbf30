package drivertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
)

// lockRows begins a transaction on drv's pool that locks the rows each
// query selects (… FOR UPDATE), as a cleanup at another relay would, and
// returns it; the test ends it.
func lockRows[TTx any](t *testing.T, drv txboxdriver.Driver[TTx], queries ...string) txboxdriver.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := drv.Pool().Begin(ctx)
	must(t, err, "begin the lock holder")
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	for _, q := range queries {
		rows, err := tx.Query(ctx, q)
		must(t, err, "lock rows")
		n := 0
		for rows.Next() {
			n++
		}
		must(t, rows.Err(), "lock rows")
		must(t, rows.Close(), "lock rows")
		if n == 0 {
			t.Fatalf("%s locked no row", q)
		}
	}
	return tx
}

// skipOneWriter skips the tests of row locks on SQLite, whose writers take
// turns on the whole database.
func skipOneWriter[TTx any](t *testing.T, drv txboxdriver.Driver[TTx]) {
	if drv.Dialect() == txboxdriver.SQLite {
		t.Skip("SQLite has one writer at a time: a cleanup never meets another's row locks")
	}
}

// guard bounds a call that must not wait for a lock: if it does, the test
// fails with the context's error instead of hanging (not a timing check:
// the call is expected to return at once, and the bound is far above it).
func guard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testCleanupBeside checks that the relay's cleanup skips the published
// rows another transaction holds (the cleanup of another relay) and
// deletes the rest, instead of waiting for them or deadlocking.
func (s *suite[TTx]) testCleanupBeside(t *testing.T) {
	drv := s.setup(t)
	skipOneWriter(t, drv)
	ob := outbox(t, drv)
	var msgs []txbox.Message
	for i := range 8 {
		msgs = append(msgs, txbox.Message{Topic: "t", Payload: []byte{byte(i)}})
	}
	add(t, drv, ob, true, msgs...)
	r := newRelay(t, drv, &Recorder{}, relaytest.With(relay.Config{Retention: time.Microsecond}, relaytest.Config{CleanupBatchSize: 3}))
	drain(t, r)
	pastRetention()

	holder := lockRows(t, drv, "SELECT id FROM txbox_outbox ORDER BY id LIMIT 3 FOR UPDATE")
	n, err := r.Cleanup(guard(t))
	if err != nil || n != 5 {
		t.Fatalf("cleanup beside a holder of 3 rows: deleted %d, %v; want the 5 others", n, err)
	}
	must(t, holder.Rollback(context.Background()), "end the lock holder")
	n, err = r.Cleanup(guard(t))
	if err != nil || n != 3 {
		t.Fatalf("cleanup once they are free: deleted %d, %v; want 3", n, err)
	}

	// Four relays' cleanups at once share the rows: each row is deleted
	// once, and none fails (no deadlock between them).
	msgs = msgs[:0]
	for i := range 60 {
		msgs = append(msgs, txbox.Message{Topic: "t", Payload: []byte{byte(i)}})
	}
	add(t, drv, ob, true, msgs...)
	drain(t, r)
	pastRetention()
	var wg sync.WaitGroup
	counts := make([]int64, 4)
	errs := make([]error, 4)
	for i := range counts {
		c := newRelay(t, drv, &Recorder{}, relaytest.With(relay.Config{Retention: time.Microsecond}, relaytest.Config{CleanupBatchSize: 2}))
		wg.Go(func() { counts[i], errs[i] = c.Cleanup(guard(t)) })
	}
	wg.Wait()
	var total int64
	for i := range counts {
		must(t, errs[i], "a concurrent cleanup")
		total += counts[i]
	}
	if total != 60 {
		t.Fatalf("concurrent cleanups deleted %v rows (%d in all), want 60 in all", counts, total)
	}
}

// testSweepBeside checks the same of the inbox's sweep: receipts another
// transaction holds (a sweep beside it, or a handler's transaction) are
// skipped, the others deleted.
func (s *suite[TTx]) testSweepBeside(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	skipOneWriter(t, drv)
	ib := s.newInbox(t, drv, inbox.Config{Retention: time.Microsecond, SweepBatchSize: 2})
	for i := range 6 {
		_, err := ib.Handle(ctx, "a", fmt.Sprint("m", i), nil, func(context.Context, TTx) error { return nil })
		must(t, err, "handle")
	}
	pastRetention()

	// One key per statement: on MySQL an IN list of two keys may be read
	// as a range under REPEATABLE READ, locking the receipts between them.
	lock := func(id string) string {
		return "SELECT message_id FROM " + inboxTable + " WHERE source = 'a' AND message_id = '" + id + "' FOR UPDATE"
	}
	holder := lockRows(t, drv, lock("m0"), lock("m3"))
	n, err := ib.Sweep(guard(t))
	if err != nil || n != 4 {
		t.Fatalf("sweep beside a holder of 2 receipts: deleted %d, %v; want the 4 others", n, err)
	}
	must(t, holder.Rollback(ctx), "end the lock holder")
	n, err = ib.Sweep(guard(t))
	if err != nil || n != 2 {
		t.Fatalf("sweep once they are free: deleted %d, %v; want 2", n, err)
	}
}
