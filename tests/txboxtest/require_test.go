package txboxtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// fakeTB records the failures of txboxtest's assertions.
type fakeTB struct {
	failures []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, a ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, a...))
}
func (f *fakeTB) Fatalf(format string, a ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, a...))
}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

var _ txboxtest.TB = (*fakeTB)(nil)
var _ txboxtest.TB = (testing.TB)(nil)

// failed runs fn against a fake TB and returns its one failure ("" if it
// passed).
func failed(t *testing.T, fn func(tb txboxtest.TB)) string {
	t.Helper()
	f := &fakeTB{}
	fn(f)
	if len(f.failures) > 1 {
		t.Fatalf("%d failures, want at most one: %q", len(f.failures), f.failures)
	}
	if len(f.failures) == 0 {
		return ""
	}
	if !strings.HasPrefix(f.failures[0], "txboxtest: ") {
		t.Errorf("failure without the banner: %q", f.failures[0])
	}
	return f.failures[0]
}

func wantFailure(t *testing.T, got string, parts ...string) {
	t.Helper()
	if got == "" {
		t.Fatalf("passed, want a failure saying %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(got, p) {
			t.Errorf("failure %q does not say %q", got, p)
		}
	}
}

// newOutbox migrates drv's database (the outbox and the default inbox
// table) and returns an Outbox on it.
func newOutbox[TTx any](t *testing.T, drv txboxdriver.Driver[TTx]) *txbox.Outbox[TTx] {
	t.Helper()
	ctx := context.Background()
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{consumer.DefaultInboxTable}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	return ob
}

// TestRequire runs the assertions on every dialect, through the caller's
// transaction and committed.
func TestRequire(t *testing.T) {
	t.Parallel()
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		testRequire(t, newOutbox(t, testenv.PgxDriver(t, 4)))
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testRequire(t, newOutbox(t, txboxsql.New(testenv.SQLite(t), txboxdriver.SQLite)))
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		testRequire(t, newOutbox(t, txboxsql.New(testenv.MySQL(t), txboxdriver.MySQL)))
	})
}

func testRequire[TTx any](t *testing.T, ob *txbox.Outbox[TTx]) {
	ctx := context.Background()
	tx, dtx, err := ob.BeginTx(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = dtx.Rollback(ctx) }()
	ids, err := ob.Add(ctx, tx,
		txbox.Message{Topic: "order.placed", Key: "c-7", Payload: []byte(`{"order":1}`), Headers: map[string]string{"tenant": "acme", "v": "1"}},
		txbox.Message{Topic: "order.placed", Key: "c-7", Payload: []byte(`{"order":2}`)},
		txbox.Message{ID: "mail-1", Topic: "email.queued", Payload: []byte("hi")},
	)
	testenv.Must(t, err, "add")

	// The caller's transaction sees its rows; the pool does not yet.
	rec := txboxtest.RequireAddedTx(ctx, t, ob, tx, &txboxtest.RequireAddedOpts{Topic: "order.placed", Payload: []byte(`{"order":1}`)})
	if rec.ID != ids[0] || rec.Key != "c-7" || rec.Headers["tenant"] != "acme" || rec.Seq == 0 || rec.CreatedAt.IsZero() {
		t.Errorf("RequireAddedTx returned %+v, want the first message (id %s) with its seq and time", rec, ids[0])
	}
	if got := txboxtest.RequireAddedTx(ctx, t, ob, tx, &txboxtest.RequireAddedOpts{ID: "mail-1"}); string(got.Payload) != "hi" || got.Headers != nil {
		t.Errorf("by id: %+v", got)
	}
	txboxtest.RequireAddedTx(ctx, t, ob, tx, &txboxtest.RequireAddedOpts{Headers: map[string]string{"v": "1"}})
	txboxtest.RequireNotAddedTx(ctx, t, ob, tx, &txboxtest.RequireAddedOpts{Topic: "order.placed", Key: "c-8"})
	txboxtest.RequireNotAdded(ctx, t, ob, nil)

	// Add sorts one call's messages by key: the unkeyed one comes first.
	recs := txboxtest.RequireManyAddedTx(ctx, t, ob, tx, []txboxtest.RequireAddedOpts{
		{Topic: "email.queued"},
		{Key: "c-7", Payload: []byte(`{"order":1}`)},
		{Key: "c-7", Payload: []byte(`{"order":2}`)},
	})
	if len(recs) != 3 || recs[0].ID != "mail-1" {
		t.Errorf("RequireManyAddedTx: %+v", recs)
	}

	t.Run("failures", func(t *testing.T) {
		wantFailure(t, failed(t, func(tb txboxtest.TB) {
			txboxtest.RequireAddedTx(ctx, tb, ob, tx, &txboxtest.RequireAddedOpts{Topic: "order.placed"})
		}), "2 messages", "ambiguous", "topic=order.placed", "holds 3 undelivered", "email.queued")
		wantFailure(t, failed(t, func(tb txboxtest.TB) {
			if r := txboxtest.RequireAddedTx(ctx, tb, ob, tx, &txboxtest.RequireAddedOpts{Topic: "order.shipped"}); r != nil {
				t.Errorf("returned %+v on failure", r)
			}
		}), "no message matched", "topic=order.shipped", "payload=")
		wantFailure(t, failed(t, func(tb txboxtest.TB) {
			txboxtest.RequireAddedTx(ctx, tb, ob, tx, &txboxtest.RequireAddedOpts{ID: "mail-1", Headers: map[string]string{"tenant": "acme"}})
		}), "no message matched", "headers")
		wantFailure(t, failed(t, func(tb txboxtest.TB) {
			txboxtest.RequireAdded(ctx, tb, ob, &txboxtest.RequireAddedOpts{ID: "mail-1"})
		}), "no message matched", "(the outbox has no undelivered message)")
		wantFailure(t, failed(t, func(tb txboxtest.TB) {
			txboxtest.RequireNotAddedTx(ctx, tb, ob, tx, &txboxtest.RequireAddedOpts{Key: "c-7"})
		}), "RequireNotAdded: 2 messages matched key=c-7")
		wantFailure(t, failed(t, func(tb txboxtest.TB) {
			txboxtest.RequireManyAddedTx(ctx, tb, ob, tx, []txboxtest.RequireAddedOpts{{Topic: "email.queued"}})
		}), "1 messages expected", "holds 3")
		wantFailure(t, failed(t, func(tb txboxtest.TB) {
			txboxtest.RequireManyAddedTx(ctx, tb, ob, tx, []txboxtest.RequireAddedOpts{{Key: "c-7"}, {Key: "c-7"}, {Topic: "email.queued"}})
		}), "message 0 does not match key=c-7", "table order")
	})

	testenv.Must(t, dtx.Commit(ctx), "commit")
	txboxtest.RequireAdded(ctx, t, ob, &txboxtest.RequireAddedOpts{ID: "mail-1"})
	txboxtest.RequireManyAdded(ctx, t, ob, []txboxtest.RequireAddedOpts{{ID: "mail-1"}, {ID: ids[0]}, {ID: ids[1]}})
}
