package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
)

func (s *suite[TTx]) newInbox(t *testing.T, drv txboxdriver.Driver[TTx], cfg inbox.Config) *inbox.Inbox[TTx] {
	t.Helper()
	cfg.Table = inboxTable
	if cfg.Hook == nil {
		cfg.Hook = func(context.Context, inbox.Event) {}
	}
	ib, err := inbox.New(drv, cfg)
	must(t, err, "inbox.New")
	return ib
}

func (s *suite[TTx]) testInboxHandle(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ib := s.newInbox(t, drv, inbox.Config{})
	ob := outbox(t, drv)
	runs := 0
	handler := func(ctx context.Context, tx TTx) error {
		runs++
		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "effect", Payload: []byte("x")})
		return err
	}
	res, err := ib.Handle(ctx, "nats:orders", "m1", map[string]string{"subject": "orders"}, handler)
	if err != nil || res != inbox.Fresh {
		t.Fatalf("first Handle = %v, %v; want fresh", res, err)
	}
	res, err = ib.Handle(ctx, "nats:orders", "m1", nil, handler)
	if err != nil || res != inbox.Duplicate {
		t.Fatalf("second Handle = %v, %v; want duplicate", res, err)
	}
	// Same id, other source: another message. Ids differing only in case
	// or trailing space are other messages too.
	for _, k := range [][2]string{{"nats:payments", "m1"}, {"nats:orders", "M1"}, {"nats:orders", "m1 "}} {
		res, err = ib.Handle(ctx, k[0], k[1], nil, handler)
		if err != nil || res != inbox.Fresh {
			t.Fatalf("Handle(%q, %q) = %v, %v; want fresh", k[0], k[1], res, err)
		}
	}
	// A failing handler rolls back its effects and the receipt.
	boom := errors.New("boom")
	res, err = ib.Handle(ctx, "nats:orders", "m2", nil, func(ctx context.Context, tx TTx) error {
		if err := handler(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	var herr *inbox.HandlerError
	if res != inbox.Failed || !errors.As(err, &herr) || !errors.Is(err, boom) {
		t.Fatalf("failing Handle = %v, %v", res, err)
	}
	res, err = ib.Handle(ctx, "nats:orders", "m2", nil, handler)
	if err != nil || res != inbox.Fresh {
		t.Fatalf("Handle after a failure = %v, %v; want fresh", res, err)
	}
	if runs != 6 {
		t.Fatalf("handler ran %d times, want 6", runs)
	}
	st, err := newRelay(t, drv, &Recorder{}, relay.Config{}).Stats(ctx)
	must(t, err, "stats")
	if st.Pending != 5 {
		t.Fatalf("%d effects committed, want 5 (the failed run's rolled back)", st.Pending)
	}
	fresh, err := ib.IsFresh(ctx, "nats:orders", "m1")
	if err != nil || fresh {
		t.Fatalf("IsFresh(m1) = %v, %v", fresh, err)
	}
	fresh, err = ib.IsFresh(ctx, "nats:orders", "never")
	if err != nil || !fresh {
		t.Fatalf("IsFresh(never) = %v, %v", fresh, err)
	}
}

func (s *suite[TTx]) testInboxLowLevel(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ib := s.newInbox(t, drv, inbox.Config{})
	tx, dtx, err := drv.BeginTx(ctx)
	must(t, err, "begin")
	fresh, err := ib.RecordReceive(ctx, tx, "src", "a", nil)
	if err != nil || !fresh {
		t.Fatalf("RecordReceive = %v, %v; want fresh", fresh, err)
	}
	fresh, err = ib.RecordReceive(ctx, tx, "src", "a", nil)
	if err != nil || fresh {
		t.Fatalf("second RecordReceive in the same tx = %v, %v; want duplicate", fresh, err)
	}
	must(t, ib.MarkProcessed(ctx, tx, "src", "a"), "mark processed")
	must(t, ib.MarkProcessed(ctx, tx, "src", "a"), "mark processed again")
	if err := ib.MarkProcessed(ctx, tx, "src", "never"); !errors.Is(err, inbox.ErrNotReceived) {
		t.Fatalf("MarkProcessed(never) = %v, want ErrNotReceived", err)
	}
	must(t, dtx.Commit(ctx), "commit")

	// Marking a committed, processed receipt again is not an error either.
	tx, dtx, err = drv.BeginTx(ctx)
	must(t, err, "begin")
	must(t, ib.MarkProcessed(ctx, tx, "src", "a"), "mark committed receipt again")
	fresh, err = ib.RecordReceive(ctx, tx, "src", "a", nil)
	if err != nil || fresh {
		t.Fatalf("RecordReceive of a committed receipt = %v, %v; want duplicate", fresh, err)
	}
	must(t, dtx.Rollback(ctx), "rollback")

	// A rolled-back receipt is forgotten.
	tx, dtx, err = drv.BeginTx(ctx)
	must(t, err, "begin")
	fresh, err = ib.RecordReceive(ctx, tx, "src", "b", nil)
	if err != nil || !fresh {
		t.Fatalf("RecordReceive(b) = %v, %v", fresh, err)
	}
	must(t, dtx.Rollback(ctx), "rollback")
	if fresh, err := ib.IsFresh(ctx, "src", "b"); err != nil || !fresh {
		t.Fatalf("IsFresh(b) after rollback = %v, %v", fresh, err)
	}
}

func (s *suite[TTx]) testInboxSweepStats(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	keep := s.newInbox(t, drv, inbox.Config{})
	ok := func(context.Context, TTx) error { return nil }
	for i := range 5 {
		_, err := keep.Handle(ctx, "a", fmt.Sprint("m", i), nil, ok)
		must(t, err, "handle")
	}
	_, err := keep.Handle(ctx, "b", "m", nil, ok)
	must(t, err, "handle")
	tx, dtx, err := drv.BeginTx(ctx)
	must(t, err, "begin")
	_, err = keep.RecordReceive(ctx, tx, "b", "unprocessed", nil)
	must(t, err, "record")
	must(t, dtx.Commit(ctx), "commit")

	st, err := keep.Stats(ctx)
	must(t, err, "stats")
	want := []inbox.SourceStats{{Source: "a", Total: 5, Processed: 5}, {Source: "b", Total: 2, Processed: 1, Pending: 1}}
	if fmt.Sprint(st) != fmt.Sprint(want) {
		t.Fatalf("stats %v, want %v", st, want)
	}
	n, err := keep.Sweep(ctx)
	if err != nil || n != 0 {
		t.Fatalf("Sweep within retention = %d, %v", n, err)
	}
	// With a retention of a microsecond, everything is past it (twice over)
	// once the clock has moved; batches of 2 take several statements.
	pastRetention()
	// SweepWith: a dry run counts and deletes nothing; a source sweeps
	// only its own receipts.
	for _, c := range []struct {
		o    inbox.SweepOptions
		want int64
	}{
		{inbox.SweepOptions{Retention: time.Microsecond, DryRun: true}, 7},
		{inbox.SweepOptions{Retention: time.Microsecond, DryRun: true, Source: "b"}, 2},
		{inbox.SweepOptions{DryRun: true}, 0},
		{inbox.SweepOptions{Retention: time.Microsecond, Source: "b"}, 2},
		{inbox.SweepOptions{Retention: time.Microsecond, DryRun: true}, 5},
	} {
		if n, err := keep.SweepWith(ctx, c.o); err != nil || n != c.want {
			t.Fatalf("SweepWith(%+v) = %d, %v; want %d", c.o, n, err, c.want)
		}
	}
	if _, err := keep.SweepWith(ctx, inbox.SweepOptions{Retention: -time.Second}); !errors.Is(err, inbox.ErrInvalidConfig) {
		t.Fatalf("SweepWith with a negative retention: %v", err)
	}
	if _, err := keep.SweepWith(ctx, inbox.SweepOptions{BatchSize: -1}); !errors.Is(err, inbox.ErrInvalidConfig) {
		t.Fatalf("SweepWith with a negative batch size: %v", err)
	}
	short := s.newInbox(t, drv, inbox.Config{Retention: time.Microsecond, SweepBatchSize: 2})
	n, err = short.Sweep(ctx)
	if err != nil || n != 5 {
		t.Fatalf("Sweep = %d, %v; want 5", n, err)
	}
	if st, _ := keep.Stats(ctx); len(st) != 0 {
		t.Fatalf("stats after sweep %v", st)
	}
	res, err := keep.Handle(ctx, "a", "m0", nil, ok)
	if err != nil || res != inbox.Fresh {
		t.Fatalf("replay after sweep = %v, %v; want fresh", res, err)
	}
}

func (s *suite[TTx]) testInboxConcurrent(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ib := s.newInbox(t, drv, inbox.Config{})
	ob := outbox(t, drv)
	const messages = 4
	var fresh, dup, runs atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for m := range messages {
		for range s.opts.Copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := ib.Handle(ctx, "src", fmt.Sprint("m", m), nil, func(ctx context.Context, tx TTx) error {
					runs.Add(1)
					_, err := ob.Add(ctx, tx, txbox.Message{Topic: "effect", Payload: []byte(fmt.Sprint(m))})
					return err
				})
				switch {
				case err != nil:
					t.Errorf("Handle: %v", err)
				case res == inbox.Fresh:
					fresh.Add(1)
				case res == inbox.Duplicate:
					dup.Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if fresh.Load() != messages || dup.Load() != int64(messages*(s.opts.Copies-1)) || runs.Load() != messages {
		t.Fatalf("%d copies of %d messages: %d fresh, %d duplicate, handler ran %d times",
			s.opts.Copies, messages, fresh.Load(), dup.Load(), runs.Load())
	}
	st, err := newRelay(t, drv, &Recorder{}, relay.Config{}).Stats(ctx)
	must(t, err, "stats")
	if st.Pending != messages {
		t.Fatalf("%d effects committed, want %d", st.Pending, messages)
	}
}
