package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
)

// TestInputDefences feeds every bad input to Handle, RecordReceive, IsFresh
// and MarkProcessed: each must fail with an *InputError, run no handler and
// leave the table empty.
func TestInputDefences(t *testing.T) {
	t.Parallel()
	onEach(t, 4, testInputDefences[pgx.Tx], testInputDefences[*sql.Tx])
}

type badInput struct {
	name       string
	source, id string
	metadata   any
	field      string
	reason     inbox.Reason
}

func badInputs() []badInput {
	long := strings.Repeat("é", 257) // 257 characters, 514 bytes
	return []badInput{
		{"empty source", "", "m", nil, "source", inbox.ReasonEmpty},
		{"empty id", src, "", nil, "message id", inbox.ReasonEmpty},
		{"long source", long, "m", nil, "source", inbox.ReasonTooLong},
		{"long id", src, long, nil, "message id", inbox.ReasonTooLong},
		{"NUL in id", src, "abc\x00x", nil, "message id", inbox.ReasonControlChar},
		{"NUL in source", "nats\x00", "m", nil, "source", inbox.ReasonControlChar},
		{"newline", src, "abc\n", nil, "message id", inbox.ReasonControlChar},
		{"unit separator", src, "a\x1fb", nil, "message id", inbox.ReasonControlChar},
		{"DEL", src, "abc\x7f", nil, "message id", inbox.ReasonControlChar},
		{"invalid UTF-8", src, "abc\xff", nil, "message id", inbox.ReasonBadUTF8},
		{"metadata over cap", src, "m", strings.Repeat("x", 64<<10), "metadata", inbox.ReasonTooLong},
		{"metadata raw over cap", src, "m", json.RawMessage(`"` + strings.Repeat("x", 64<<10) + `"`), "metadata", inbox.ReasonTooLong},
		{"metadata channel", src, "m", make(chan int), "metadata", inbox.ReasonNotJSON},
		{"metadata NaN", src, "m", map[string]float64{"x": math.NaN()}, "metadata", inbox.ReasonNotJSON},
		{"metadata func", src, "m", map[string]any{"f": func() {}}, "metadata", inbox.ReasonNotJSON},
		{"metadata invalid raw JSON", src, "m", json.RawMessage(`{"a":`), "metadata", inbox.ReasonNotJSON},
		{"metadata NUL", src, "m", map[string]string{"k": "a\x00b"}, "metadata", inbox.ReasonControlChar},
	}
}

func checkInputError(t *testing.T, what string, c badInput, err error) {
	t.Helper()
	var ie *inbox.InputError
	if !errors.As(err, &ie) || !errors.Is(err, inbox.ErrInvalidInput) {
		t.Errorf("%s: %s: err = %v, want an *InputError", c.name, what, err)
		return
	}
	if ie.Field != c.field || ie.Reason != c.reason {
		t.Errorf("%s: %s: got %s %q, want %s %q (%v)", c.name, what, ie.Field, ie.Reason, c.field, c.reason, err)
	}
}

func testInputDefences[TTx any](t *testing.T, e *env[TTx]) {
	ctx := context.Background()
	ib := e.newInbox(t, inbox.Config{})
	for _, c := range badInputs() {
		res, err := ib.Handle(ctx, c.source, c.id, c.metadata, func(context.Context, TTx) error {
			t.Errorf("%s: the handler ran", c.name)
			return nil
		})
		if res != inbox.Failed {
			t.Errorf("%s: Handle result %v", c.name, res)
		}
		checkInputError(t, "Handle", c, err)

		tx, dtx, err := e.drv.BeginTx(ctx)
		testenv.Must(t, err, "begin")
		fresh, err := ib.RecordReceive(ctx, tx, c.source, c.id, c.metadata)
		if fresh {
			t.Errorf("%s: RecordReceive reported fresh", c.name)
		}
		checkInputError(t, "RecordReceive", c, err)
		if c.field != "metadata" {
			checkInputError(t, "MarkProcessed", c, ib.MarkProcessed(ctx, tx, c.source, c.id))
			_, err = ib.IsFresh(ctx, c.source, c.id)
			checkInputError(t, "IsFresh", c, err)
		}
		// Commit, so that anything written would show.
		testenv.Must(t, dtx.Commit(ctx), "commit")
	}
	if n := e.inboxRows(t); n != 0 {
		t.Fatalf("bad inputs wrote %d rows", n)
	}

	// The limits are inclusive and count characters, not bytes.
	limit := strings.Repeat("é", 256)
	res, err := ib.Handle(ctx, limit, limit, strings.Repeat("x", 64<<10-2), func(context.Context, TTx) error { return nil })
	if err != nil || res != inbox.Fresh {
		t.Fatalf("Handle at the limits = %v, %v; want fresh", res, err)
	}
	// A literal backslash-u-0000 in a string is not a NUL.
	res, err = ib.Handle(ctx, src, "escaped", map[string]string{"k": `\u0000`}, func(context.Context, TTx) error { return nil })
	if err != nil || res != inbox.Fresh {
		t.Fatalf(`Handle with a literal \u0000 = %v, %v; want fresh`, res, err)
	}
}

// TestNULCollision: "abc" and "abc\x00x" must never deduplicate together.
// With the NUL refused, the second is an error, never a silent duplicate.
func TestNULCollision(t *testing.T) {
	t.Parallel()
	onEach(t, 4, testNULCollision[pgx.Tx], testNULCollision[*sql.Tx])
}

func testNULCollision[TTx any](t *testing.T, e *env[TTx]) {
	ctx := context.Background()
	ib := e.newInbox(t, inbox.Config{})
	ok := func(context.Context, TTx) error { return nil }
	if res, err := ib.Handle(ctx, src, "abc", nil, ok); err != nil || res != inbox.Fresh {
		t.Fatalf("Handle abc = %v, %v", res, err)
	}
	res, err := ib.Handle(ctx, src, "abc\x00x", nil, ok)
	if res == inbox.Duplicate || !errors.Is(err, inbox.ErrInvalidInput) {
		t.Fatalf(`Handle "abc\x00x" = %v, %v; want an input error, never a duplicate of "abc"`, res, err)
	}
	if res, err := ib.Handle(ctx, src+"\x00", "abc", nil, ok); res == inbox.Duplicate || !errors.Is(err, inbox.ErrInvalidInput) {
		t.Fatalf("Handle with a NUL-suffixed source = %v, %v", res, err)
	}
}
