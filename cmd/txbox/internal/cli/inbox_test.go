package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// txbox inbox stats prints the Go API's counts; inbox sweep --dry-run
// counts what a sweep deletes, and deletes nothing; --source narrows it.
func TestInboxCommands(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	db := "sqlite://" + path
	mustRun(t, "migrate", "up", "--db", db, "--no-outbox", "--inbox-table", "orders_inbox")
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open")
	defer conn.Close()
	day := (24 * time.Hour).Microseconds()
	now := time.Now().UnixMicro()
	// Source a: two processed 10 days ago, one unprocessed 8 days ago, one
	// processed now. Source "b\x1b[2J": one processed 10 days ago.
	_, err = conn.Exec(`INSERT INTO orders_inbox (source, message_id, received_at, processed_at) VALUES
		('a', 'm1', ?1, ?1), ('a', 'm2', ?1, ?1), ('a', 'm3', ?4, NULL), ('a', 'm4', ?2, ?2), (?3, 'm1', ?1, ?1)`,
		now-10*day, now, "b\x1b[2J", now-8*day)
	testenv.Must(t, err, "insert")
	ib, err := inbox.New(txboxsql.New(conn, txboxdriver.SQLite), inbox.Config{Table: "orders_inbox"})
	testenv.Must(t, err, "inbox.New")
	st, err := ib.Stats(context.Background())
	testenv.Must(t, err, "stats")

	args := []string{"--db", db, "--inbox-table", "orders_inbox"}
	cmd := func(a ...string) string { t.Helper(); return mustRun(t, append(a, args...)...) }
	out := cmd("inbox", "stats", "--json")
	noRawControls(t, "inbox stats --json", out)
	var js []inbox.SourceStats
	if err := json.Unmarshal([]byte(out), &js); err != nil || fmt.Sprint(js) != fmt.Sprint(st) || len(st) != 2 || st[0].Total != 4 || st[0].Pending != 1 {
		t.Fatalf("inbox stats --json (%v) = %v, Go API %v:\n%s", err, js, st, out)
	}
	out = cmd("inbox", "stats")
	noRawControls(t, "inbox stats", out)
	if !strings.Contains(out, `b\x1b[2J`) || !regexp.MustCompile(`(?m)^a\s+4\s+3\s+1$`).MatchString(out) {
		t.Errorf("inbox stats:\n%s", out)
	}

	count := func() (n int) {
		testenv.Must(t, conn.QueryRow("SELECT count(*) FROM orders_inbox").Scan(&n), "count")
		return n
	}
	// Retention 5 days: the three processed receipts of 10 days ago go; the
	// unprocessed one of 8 days ago is kept (twice retention: 10 days).
	// With --retention 4 days it goes too.
	for _, c := range []struct {
		args []string
		want string
		left int
	}{
		{[]string{"--retention", "120h", "--dry-run"}, "would sweep 3 receipt(s)", 5},
		{[]string{"--retention", "96h", "--dry-run"}, "would sweep 4 receipt(s)", 5},
		{[]string{"--retention", "120h", "--dry-run", "--source", "a"}, "would sweep 2 receipt(s)", 5},
		{[]string{"--retention", "120h", "--source", "a"}, "swept 2 receipt(s)", 3},
		{[]string{"--dry-run"}, "would sweep 0 receipt(s)", 3},
		{[]string{"--retention", "96h"}, "swept 2 receipt(s)", 1},
	} {
		if out := cmd(append([]string{"inbox", "sweep"}, c.args...)...); strings.TrimSpace(out) != c.want {
			t.Errorf("inbox sweep %v: %q, want %q", c.args, out, c.want)
		}
		if n := count(); n != c.left {
			t.Errorf("after inbox sweep %v: %d receipts, want %d", c.args, n, c.left)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inbox", "sweep", "--retention", "-1h"}, "--retention -1h0m0s: must be positive"},
		{[]string{"inbox", "sweep", "--retention", "week"}, "invalid argument"},
		{[]string{"inbox", "sweep", "--batch-size", "0"}, "--batch-size 0: want 1 or more"},
		{[]string{"inbox", "sweep", "--progress", "-1s"}, "--progress -1s: want 0 or more"},
	} {
		if _, _, err := run(context.Background(), append(c.args, args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("txbox %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
	if _, _, err := run(context.Background(), "inbox", "stats", "--db", db); err == nil || !strings.Contains(err.Error(), "--inbox-table") {
		t.Errorf("inbox stats without --inbox-table: %v", err)
	}

	// A long sweep says how far it got: here after each batch of two.
	for i := range 5 {
		_, err = conn.Exec(`INSERT INTO orders_inbox (source, message_id, received_at, processed_at) VALUES ('c', ?1, ?2, ?2)`, fmt.Sprint("p", i), now-10*day)
		testenv.Must(t, err, "insert")
	}
	stdout, stderr, err := run(context.Background(), append([]string{"inbox", "sweep", "--retention", "96h", "--batch-size", "2", "--progress", "0"}, args...)...)
	testenv.Must(t, err, "inbox sweep --progress 0")
	want := "sweeping: 2 receipt(s) deleted so far\nsweeping: 4 receipt(s) deleted so far\nsweeping: 5 receipt(s) deleted so far\n"
	if stdout != "swept 5 receipt(s)\n" || stderr != want {
		t.Errorf("inbox sweep --batch-size 2 --progress 0 printed %q, and on standard error %q; want %q", stdout, stderr, want)
	}
}

// --inbox-table names a list on inbox as on migrate: stats and sweep go
// through each table; inbox has no outbox --table.
func TestInboxSeveralTables(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inboxes.db")
	db := "sqlite://" + path
	mustRun(t, "migrate", "up", "--db", db, "--no-outbox", "--inbox-table", "orders_inbox,billing_inbox")
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open")
	defer conn.Close()
	now := time.Now().UnixMicro()
	for _, q := range []string{`INSERT INTO orders_inbox (source, message_id, received_at, processed_at) VALUES ('shop', 'm1', ?1, ?1)`,
		`INSERT INTO billing_inbox (source, message_id, received_at, processed_at) VALUES ('ledger', 'm1', ?1, ?1), ('ledger', 'm2', ?1, NULL)`} {
		_, err = conn.Exec(q, now)
		testenv.Must(t, err, "insert")
	}
	var st []struct {
		Table, Source             string
		Total, Processed, Pending int64
	}
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, "inbox", "stats", "--json", "--db", db, "--inbox-table", "orders_inbox", "--inbox-table", "billing_inbox")), &st), "stats --json")
	if len(st) != 2 || st[0].Table != "orders_inbox" || st[0].Total != 1 || st[1].Table != "billing_inbox" || st[1].Total != 2 || st[1].Pending != 1 {
		t.Fatalf("inbox stats of two tables: %+v", st)
	}
	out := mustRun(t, "inbox", "sweep", "--dry-run", "--db", db, "--inbox-table", "orders_inbox,billing_inbox")
	if !strings.Contains(out, "orders_inbox: would sweep 0 receipt(s)") || !strings.Contains(out, "billing_inbox: would sweep 0 receipt(s)") {
		t.Fatalf("inbox sweep --dry-run of two tables:\n%s", out)
	}
	if help := mustRun(t, "inbox", "stats", "--help"); strings.Contains(help, "--table") {
		t.Fatalf("inbox stats --help shows an outbox --table:\n%s", help)
	}
}
