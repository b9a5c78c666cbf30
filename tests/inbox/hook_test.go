package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// TestDefaultHookLogs: without a Hook, the audit events go to the Logger.
func TestDefaultHookLogs(t *testing.T) {
	t.Parallel()
	e := setup(t, txboxsql.New(testenv.SQLite(t), txboxdriver.SQLite))
	var buf testenv.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ib := e.newInbox(t, inbox.Config{Logger: l})
	ctx := context.Background()
	_, err := ib.Handle(ctx, src, "m1", nil, func(context.Context, *sql.Tx) error { return nil })
	testenv.Must(t, err, "Handle")
	_, _ = ib.Handle(ctx, src, "m1", nil, func(context.Context, *sql.Tx) error { return nil })
	_, _ = ib.Handle(ctx, src, "m2", nil, func(context.Context, *sql.Tx) error { return errBusiness })
	_, err = ib.Sweep(ctx)
	testenv.Must(t, err, "Sweep")
	out := buf.String()
	for _, want := range []string{
		"level=DEBUG msg=inbox.received", "level=DEBUG msg=inbox.handled", "level=DEBUG msg=inbox.duplicate",
		"level=WARN msg=inbox.handle_failed", "message_id=m2", "level=DEBUG msg=inbox.swept",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestNilHandler(t *testing.T) {
	t.Parallel()
	ib, err := inbox.New(txboxsql.New(nil, txboxdriver.SQLite), inbox.Config{Table: "inbox"})
	testenv.Must(t, err, "New")
	if _, err := ib.Handle(context.Background(), src, "m1", nil, nil); err == nil || errors.Is(err, inbox.ErrInvalidInput) {
		t.Fatalf("Handle with a nil handler = %v", err)
	}
}
