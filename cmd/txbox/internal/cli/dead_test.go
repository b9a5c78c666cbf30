package cli_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// txbox dead list shows a dead message and how many it parks; redrive and
// discard act on the SEQs given, and refuse to act on nothing.
func TestDeadCommands(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dead.db")
	db := "sqlite://" + path
	mustRun(t, "migrate", "up", "--db", db)
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open")
	defer conn.Close()
	_, err = conn.Exec(`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, attempts, last_error, dead_at)
		VALUES ('m1', 'order.placed', 'K', x'00', 10, 'too large', 1), ('m2', 'order.placed', 'K', x'00', 0, NULL, NULL),
		       ('m3', 'order.placed', 'L', x'00', 10, 'no stream', 1)`)
	testenv.Must(t, err, "insert")

	out := mustRun(t, "dead", "list", "--db", db)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "m1") || !strings.Contains(lines[1], "too large") {
		t.Fatalf("dead list:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[0] != "1" || f[3] != "K" || f[4] != "1" {
		t.Fatalf("dead list row %q: want SEQ 1, KEY K, PARKS 1", lines[1])
	}
	if _, _, err := run(t.Context(), "dead", "redrive", "--db", db); err == nil || !strings.Contains(err.Error(), "--all") {
		t.Fatalf("redrive with no SEQ: %v", err)
	}
	if _, _, err := run(t.Context(), "dead", "discard", "--db", db, "x"); err == nil || !strings.Contains(err.Error(), "not a SEQ") {
		t.Fatalf("discard x: %v", err)
	}
	if _, _, err := run(t.Context(), "dead", "redrive", "--db", db, "3", "--all"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("redrive 3 --all: %v", err)
	}
	// m2 (seq 2) is pending, not dead: nothing is redriven, and the
	// output does not claim "redrove 0" before the error.
	out, _, err = run(t.Context(), "dead", "redrive", "--db", db, "2")
	if err == nil || !strings.Contains(err.Error(), "1 of the 1 SEQs given are not dead messages") || strings.Contains(out, "redrove") {
		t.Fatalf("redrive of a pending row: %q, %v", out, err)
	}
	if out := mustRun(t, "dead", "redrive", "--db", db, "1"); !strings.Contains(out, "redrove 1") {
		t.Fatalf("redrive: %s", out)
	}
	var dead, attempts int
	testenv.Must(t, conn.QueryRow("SELECT count(*) FROM txbox_outbox WHERE dead_at IS NOT NULL").Scan(&dead), "count")
	testenv.Must(t, conn.QueryRow("SELECT attempts FROM txbox_outbox WHERE message_id = 'm1'").Scan(&attempts), "attempts")
	if dead != 1 || attempts != 0 {
		t.Fatalf("after redrive: %d dead, m1 attempts %d; want 1 and 0", dead, attempts)
	}
	if out := mustRun(t, "dead", "discard", "--db", db, "--all", "--yes"); !strings.Contains(out, "discarded 1") {
		t.Fatalf("discard --all: %s", out)
	}
	if out := mustRun(t, "dead", "list", "--db", db); !strings.Contains(out, "no dead messages") {
		t.Fatalf("list after discard: %s", out)
	}
	// A table that is not there: the error says how to create it.
	var out2, errOut testenv.Buffer
	if code := cli.Main(t.Context(), []string{"dead", "list", "--db", db, "--table", "nope"}, &out2, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "no such table") || !strings.Contains(errOut.String(), "hint: the table (or its schema) does not exist: create it with `txbox migrate up`") {
		t.Fatalf("dead list of a missing table: exit %d:\n%s", code, errOut.String())
	}
}

// migrate covers inbox tables too.
func TestMigrateInboxTable(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "inbox.db")
	out := mustRun(t, "migrate", "up", "--db", db, "--inbox-table", "orders_inbox")
	if !strings.Contains(out, "applied inbox:orders_inbox 001") || !strings.Contains(out, "applied outbox:txbox_outbox 001") {
		t.Fatalf("migrate up:\n%s", out)
	}
	out = mustRun(t, "migrate", "sql", "--dialect", "postgres", "--no-outbox", "--inbox-table", "a_inbox")
	if !strings.Contains(out, `CREATE TABLE "a_inbox"`) || strings.Contains(out, "txbox_outbox") {
		t.Fatalf("migrate sql --no-outbox --inbox-table a_inbox:\n%s", out)
	}
}
