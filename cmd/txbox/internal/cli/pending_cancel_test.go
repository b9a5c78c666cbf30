package cli_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// pending list shows a scheduled message apart, with its due time; pending
// cancel discards it, and says why it cannot cancel a delivered or
// unknown message (exit status 1).
func TestPendingScheduledAndCancel(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "p.db")
	db := "sqlite://" + path
	mustRun(t, "migrate", "up", "--db", db)
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open")
	defer conn.Close()
	ob, err := txbox.New(txboxsql.New(conn, txboxdriver.SQLite), txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	due := time.Date(2999, 1, 2, 3, 4, 5, 0, time.UTC)
	_, err = ob.AddNoTx(context.Background(),
		txbox.Message{ID: "later", Topic: "payment.reminder", Payload: []byte("x"), DeliverAt: due},
		txbox.Message{ID: "now", Topic: "order.placed", Payload: []byte("y")},
		txbox.Message{ID: "sent", Topic: "order.placed", Payload: []byte("z")})
	testenv.Must(t, err, "add")
	_, err = conn.Exec("UPDATE txbox_outbox SET published_at = created_at WHERE message_id = 'sent'")
	testenv.Must(t, err, "mark")

	out := mustRun(t, "pending", "list", "--db", db)
	if !regexp.MustCompile(`(?m)^\d+\s+scheduled\s+payment\.reminder\s+0\s+2999-01-02T03:04:05Z`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\d+\s+pending\s+order\.placed\s+0\s+-`).MatchString(out) {
		t.Fatalf("pending list does not show the scheduled message apart with its due time:\n%s", out)
	}

	out, _, err = run(t.Context(), "pending", "cancel", "--db", db, "later", "sent", "nope")
	if err == nil || !strings.Contains(err.Error(), "2 of 3 message(s) not cancelled") {
		t.Fatalf("pending cancel: error %v, want 2 of 3 not cancelled", err)
	}
	for _, want := range []string{
		"later\tcancelled (1 row(s) discarded)",
		"sent\tnot cancelled: message already delivered: cancel \"sent\": published at ",
		"nope\tnot cancelled: no outbox message with this id",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("pending cancel output lacks %q:\n%s", want, out)
		}
	}
	var n int
	testenv.Must(t, conn.QueryRow("SELECT count(*) FROM txbox_outbox WHERE message_id = 'later'").Scan(&n), "count")
	if n != 0 {
		t.Fatalf("the cancelled message is still in the table")
	}
	if out := mustRun(t, "pending", "cancel", "--db", db, "now"); !strings.Contains(out, "now\tcancelled") {
		t.Fatalf("pending cancel now: %q", out)
	}
}
