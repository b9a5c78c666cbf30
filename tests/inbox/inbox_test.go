package inbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

const src = "nats:orders"

func TestHandle(t *testing.T) {
	t.Parallel()
	onEach(t, 4, testHandle, testHandle)
}

func testHandle[TTx any](t *testing.T, e *env[TTx]) {
	ctx := context.Background()
	ev := newEvents()
	ib := e.newInbox(t, inbox.Config{Hook: ev.hook})

	fresh, err := ib.IsFresh(ctx, src, "m1")
	testenv.Must(t, err, "IsFresh")
	if !fresh {
		t.Fatal("IsFresh before any receipt = false")
	}
	runs := 0
	handler := func(ctx context.Context, tx TTx) error {
		runs++
		return e.bump(ctx, tx, "m1")
	}
	res, err := ib.Handle(ctx, src, "m1", map[string]any{"subject": "orders.created"}, handler)
	if err != nil || res != inbox.Fresh {
		t.Fatalf("first Handle = %v, %v; want fresh", res, err)
	}
	res, err = ib.Handle(ctx, src, "m1", nil, handler)
	if err != nil || res != inbox.Duplicate {
		t.Fatalf("second Handle = %v, %v; want duplicate", res, err)
	}
	// The same id from another source is another message.
	res, err = ib.Handle(ctx, "kafka:orders", "m1", nil, func(context.Context, TTx) error { return nil })
	if err != nil || res != inbox.Fresh {
		t.Fatalf("Handle from another source = %v, %v; want fresh", res, err)
	}
	if runs != 1 || e.counter(t, "m1") != 1 {
		t.Fatalf("handler ran %d times, counter %d; want 1, 1", runs, e.counter(t, "m1"))
	}
	fresh, err = ib.IsFresh(ctx, src, "m1")
	testenv.Must(t, err, "IsFresh")
	if fresh {
		t.Fatal("IsFresh after Handle = true")
	}
	if n := e.count(t, `SELECT count(*) FROM "`+e.table+`" WHERE processed_at IS NOT NULL AND metadata IS NOT NULL AND source = `+e.ph(1), src); n != 1 {
		t.Fatalf("processed rows with metadata = %d, want 1", n)
	}
	stats, err := ib.Stats(ctx)
	testenv.Must(t, err, "Stats")
	want := []inbox.SourceStats{{Source: "kafka:orders", Total: 1, Processed: 1}, {Source: src, Total: 1, Processed: 1}}
	if !slices.Equal(stats, want) {
		t.Fatalf("Stats = %+v, want %+v", stats, want)
	}
	got := ev.kinds()
	wantKinds := []inbox.EventKind{inbox.EventReceived, inbox.EventHandled, inbox.EventDuplicate, inbox.EventReceived, inbox.EventHandled}
	if !slices.Equal(got, wantKinds) {
		t.Fatalf("events = %v, want %v", got, wantKinds)
	}
}

func TestHandlerErrorRollsBack(t *testing.T) {
	t.Parallel()
	onEach(t, 4, testHandlerErrorRollsBack, testHandlerErrorRollsBack)
}

var errBusiness = errors.New("business rule said no")

func testHandlerErrorRollsBack[TTx any](t *testing.T, e *env[TTx]) {
	ctx := context.Background()
	ev := newEvents()
	ib := e.newInbox(t, inbox.Config{Hook: ev.hook})

	res, err := ib.Handle(ctx, src, "m1", nil, func(ctx context.Context, tx TTx) error {
		if err := e.bump(ctx, tx, "m1"); err != nil {
			return err
		}
		return errBusiness
	})
	var herr *inbox.HandlerError
	if res != inbox.Failed || !errors.As(err, &herr) || !errors.Is(err, errBusiness) || herr.MessageID != "m1" || herr.Source != src {
		t.Fatalf("Handle = %v, %v; want failed with a *HandlerError wrapping errBusiness", res, err)
	}
	if n := e.inboxRows(t); n != 0 {
		t.Fatalf("inbox rows after a failed handler = %d, want 0", n)
	}
	if n := e.counter(t, "m1"); n != 0 {
		t.Fatalf("business write survived the handler's error: counter %d", n)
	}
	// The redelivery runs the handler again.
	res, err = ib.Handle(ctx, src, "m1", nil, func(ctx context.Context, tx TTx) error { return e.bump(ctx, tx, "m1") })
	if err != nil || res != inbox.Fresh || e.counter(t, "m1") != 1 {
		t.Fatalf("redelivery = %v, %v, counter %d; want fresh, 1", res, err, e.counter(t, "m1"))
	}
	// A panic rolls back too, and propagates.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the handler's panic did not propagate")
			}
		}()
		_, _ = ib.Handle(ctx, src, "m2", nil, func(ctx context.Context, tx TTx) error {
			_ = e.bump(ctx, tx, "m2")
			panic("boom")
		})
	}()
	if n := e.counter(t, "m2"); n != 0 {
		t.Fatalf("business write survived the handler's panic: counter %d", n)
	}
	fresh, err := ib.IsFresh(ctx, src, "m2")
	if err != nil || !fresh {
		t.Fatalf("IsFresh after a panic = %v, %v; want true", fresh, err)
	}
	got := ev.kinds()
	want := []inbox.EventKind{inbox.EventReceived, inbox.EventHandleFailed, inbox.EventReceived, inbox.EventHandled, inbox.EventReceived}
	if !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
}

func TestLowLevel(t *testing.T) {
	t.Parallel()
	onEach(t, 4, testLowLevel, testLowLevel)
}

func testLowLevel[TTx any](t *testing.T, e *env[TTx]) {
	ctx := context.Background()
	ib := e.newInbox(t, inbox.Config{})

	tx, dtx, err := e.drv.BeginTx(ctx)
	testenv.Must(t, err, "begin")
	fresh, err := ib.RecordReceive(ctx, tx, src, "m1", []int{1, 2})
	if err != nil || !fresh {
		t.Fatalf("RecordReceive = %v, %v; want fresh", fresh, err)
	}
	fresh, err = ib.RecordReceive(ctx, tx, src, "m1", nil)
	if err != nil || fresh {
		t.Fatalf("RecordReceive again in the same tx = %v, %v; want duplicate", fresh, err)
	}
	testenv.Must(t, dtx.Commit(ctx), "commit")

	stats, err := ib.Stats(ctx)
	testenv.Must(t, err, "Stats")
	if want := []inbox.SourceStats{{Source: src, Total: 1, Pending: 1}}; !slices.Equal(stats, want) {
		t.Fatalf("Stats = %+v, want %+v", stats, want)
	}

	tx, dtx, err = e.drv.BeginTx(ctx)
	testenv.Must(t, err, "begin")
	testenv.Must(t, ib.MarkProcessed(ctx, tx, src, "m1"), "MarkProcessed")
	testenv.Must(t, ib.MarkProcessed(ctx, tx, src, "m1"), "MarkProcessed again")
	if err := ib.MarkProcessed(ctx, tx, src, "never-received"); !errors.Is(err, inbox.ErrNotReceived) {
		t.Fatalf("MarkProcessed of an unknown message = %v, want ErrNotReceived", err)
	}
	testenv.Must(t, dtx.Commit(ctx), "commit")

	stats, err = ib.Stats(ctx)
	testenv.Must(t, err, "Stats")
	if want := []inbox.SourceStats{{Source: src, Total: 1, Processed: 1}}; !slices.Equal(stats, want) {
		t.Fatalf("Stats = %+v, want %+v", stats, want)
	}

	// A rolled-back receipt is forgotten.
	tx, dtx, err = e.drv.BeginTx(ctx)
	testenv.Must(t, err, "begin")
	fresh, err = ib.RecordReceive(ctx, tx, src, "m2", nil)
	if err != nil || !fresh {
		t.Fatalf("RecordReceive = %v, %v; want fresh", fresh, err)
	}
	testenv.Must(t, dtx.Rollback(ctx), "rollback")
	if fresh, err := ib.IsFresh(ctx, src, "m2"); err != nil || !fresh {
		t.Fatalf("IsFresh after rollback = %v, %v; want true", fresh, err)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	onEach(t, 4, testSweep, testSweep)
}

func testSweep[TTx any](t *testing.T, e *env[TTx]) {
	ctx := context.Background()
	ev := newEvents()
	ib := e.newInbox(t, inbox.Config{Retention: 10 * 24 * time.Hour, SweepBatchSize: 2, Hook: ev.hook})
	day := 24 * time.Hour
	cases := []struct {
		id        string
		age       time.Duration
		processed bool
		swept     bool
	}{
		{"processed-new", 9 * day, true, false},
		{"processed-old", 11 * day, true, true},
		{"processed-older", 25 * day, true, true},
		{"pending-new", 11 * day, false, false},
		{"pending-19d", 19 * day, false, false},
		{"pending-old", 21 * day, false, true},
		{"pending-older", 40 * day, false, true},
		{"processed-old-2", 12 * day, true, true},
		{"processed-old-3", 13 * day, true, true},
	}
	for _, c := range cases {
		tx, dtx, err := e.drv.BeginTx(ctx)
		testenv.Must(t, err, "begin")
		_, err = ib.RecordReceive(ctx, tx, src, c.id, nil)
		testenv.Must(t, err, "RecordReceive")
		if c.processed {
			testenv.Must(t, ib.MarkProcessed(ctx, tx, src, c.id), "MarkProcessed")
		}
		testenv.Must(t, dtx.Commit(ctx), "commit")
		at := any(time.Now().Add(-c.age))
		if e.drv.Dialect() == txboxdriver.SQLite {
			at = time.Now().Add(-c.age).UnixMicro()
		}
		e.exec(t, `UPDATE "`+e.table+`" SET received_at = `+e.ph(1)+` WHERE message_id = `+e.ph(2), at, c.id)
	}
	ev.kinds()
	n, err := ib.Sweep(ctx)
	testenv.Must(t, err, "Sweep")
	want := 0
	for _, c := range cases {
		fresh, err := ib.IsFresh(ctx, src, c.id)
		testenv.Must(t, err, "IsFresh")
		if fresh != c.swept {
			t.Errorf("%s: swept = %v, want %v", c.id, fresh, c.swept)
		}
		if c.swept {
			want++
		}
	}
	if n != int64(want) {
		t.Fatalf("Sweep = %d, want %d", n, want)
	}
	if n, err := ib.Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
	// After retention, a replay is handled again: the documented edge of
	// the guarantee.
	res, err := ib.Handle(ctx, src, "processed-old", nil, func(context.Context, TTx) error { return nil })
	if err != nil || res != inbox.Fresh {
		t.Fatalf("replay after retention = %v, %v; want fresh", res, err)
	}
	var swept []inbox.Event
	for len(ev.ch) > 0 {
		if e := <-ev.ch; e.Kind == inbox.EventSwept {
			swept = append(swept, e)
		}
	}
	if len(swept) != 2 || swept[0].Deleted != int64(want) || swept[1].Deleted != 0 {
		t.Fatalf("swept events = %+v", swept)
	}
}

func TestSweepCancelled(t *testing.T) {
	t.Parallel()
	e := setup(t, txboxsql.New(testenv.SQLite(t), txboxdriver.SQLite))
	ib := e.newInbox(t, inbox.Config{Hook: func(context.Context, inbox.Event) {}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ib.Sweep(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sweep with a cancelled context = %v", err)
	}
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	sqlite := txboxsql.New(nil, txboxdriver.SQLite)
	pg := txboxsql.New(nil, txboxdriver.Postgres)
	for _, c := range []struct {
		name string
		drv  *txboxsql.Driver
		cfg  inbox.Config
		ok   bool
	}{
		{"minimal", sqlite, inbox.Config{Table: "inbox"}, true},
		{"schema on postgres", pg, inbox.Config{Table: "inbox", Schema: "app"}, true},
		{"no table", sqlite, inbox.Config{}, false},
		{"injection", sqlite, inbox.Config{Table: `inbox"; DROP TABLE users; --`}, false},
		{"dotted", pg, inbox.Config{Table: "public.inbox"}, false},
		{"leading digit", sqlite, inbox.Config{Table: "1inbox"}, false},
		{"too long", pg, inbox.Config{Table: strings.Repeat("a", 64)}, false},
		{"bad schema", pg, inbox.Config{Table: "inbox", Schema: "a b"}, false},
		{"schema on sqlite", sqlite, inbox.Config{Table: "inbox", Schema: "app"}, false},
		{"negative retention", sqlite, inbox.Config{Table: "inbox", Retention: -time.Hour}, false},
		{"negative cap", sqlite, inbox.Config{Table: "inbox", MaxIDLen: -1}, false},
		{"mysql", txboxsql.New(nil, txboxdriver.MySQL), inbox.Config{Table: "inbox"}, true},
		{"unknown dialect", txboxsql.New(nil, txboxdriver.Dialect("oracle")), inbox.Config{Table: "inbox"}, false},
	} {
		ib, err := inbox.New(c.drv, c.cfg)
		if c.ok != (err == nil) {
			t.Errorf("%s: New = %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, inbox.ErrInvalidConfig) {
			t.Errorf("%s: error %v does not match ErrInvalidConfig", c.name, err)
		}
		if c.ok && (ib.Table() != c.cfg.Table || ib.Retention() != inbox.DefaultRetention) {
			t.Errorf("%s: Table %q, Retention %v", c.name, ib.Table(), ib.Retention())
		}
	}
}
