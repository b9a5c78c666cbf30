package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/txbox/txbox/tests/testenv"
)

// One dead row that breaks the table's checks (a topic with a space, as
// the contract migration parks old rows) among valid ones: dead redrive
// --all redrives the others, names the refused row with the database's
// reason and exits non-zero; an explicit SEQ list does the same, and says
// which SEQs are not dead; discard --all then discards it.
func TestDeadBulkRefusesRowByRow(t *testing.T) {
	t.Parallel()
	type db struct {
		args  []string
		exec  func(q string) error
		count func(q string) int
		id    func(topic string) int64 // the SEQ of the row with topic
		now   string                   // the dialect's "dead at" value
	}
	bulk := func(t *testing.T, d db) {
		insert := func(topic string) {
			t.Helper()
			testenv.Must(t, d.exec(`INSERT INTO txbox_outbox (topic, payload, attempts, last_error, dead_at)
				VALUES ('`+topic+`', 'x', 10, 'no stream', `+d.now+`)`), "insert %q", topic)
		}
		for _, topic := range []string{"ok.1", "ok.2", "bad topic", "ok.4", "ok.5"} {
			insert(topic)
		}
		// SEQs are the table's ids, read back: a start-up probe may have
		// used some already.
		bad := d.id("bad topic")
		seq := func(n int64) string { return strconv.FormatInt(n, 10) }
		args := func(a ...string) []string { return append(a, d.args...) }
		out, _, err := run(t.Context(), args("dead", "redrive", "--all", "--yes")...)
		t.Logf("redrive --all: %q, %v", out, err)
		if err == nil || !strings.Contains(err.Error(), "refused to redrive 1 dead message(s) (seq "+seq(bad)+")") {
			t.Fatalf("redrive --all with one invalid row: err %v, want the refusal of seq %d", err, bad)
		}
		if !strings.Contains(out, "redrove 4 dead message(s)") || !strings.Contains(out, "refused seq "+seq(bad)+": ") || !strings.Contains(out, "topic") {
			t.Fatalf("redrive --all output:\n%s", out)
		}
		if dead, pending := d.count("dead_at IS NOT NULL"), d.count("dead_at IS NULL"); dead != 1 || pending != 4 {
			t.Fatalf("after redrive --all: %d dead, %d pending; want 1 and 4", dead, pending)
		}
		// An explicit list: the invalid row, two valid dead rows, a SEQ that
		// is pending and one that does not exist.
		insert("ok.6")
		insert("ok.7")
		list := []string{seq(bad), seq(d.id("ok.6")), seq(d.id("ok.7")), seq(d.id("ok.1")), seq(d.id("ok.7") + 1000)}
		out, _, err = run(t.Context(), args(append([]string{"dead", "redrive", "--json"}, list...)...)...)
		t.Logf("redrive --json %v: %s, %v", list, out, err)
		var res struct {
			Action  string
			Count   int64
			Missed  int64
			Refused []struct {
				Seq    int64
				Reason string
			}
		}
		if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
			t.Fatalf("--json output %q: %v", out, jerr)
		}
		if err == nil || res.Action != "redrive" || res.Count != 2 || res.Missed != 2 || len(res.Refused) != 1 || res.Refused[0].Seq != bad ||
			!strings.Contains(res.Refused[0].Reason, "topic") {
			t.Fatalf("redrive --json %v: %+v, %v; want 2 redriven, seq %d refused, 2 missed, and an error", list, res, err, bad)
		}
		if !strings.Contains(err.Error(), "2 of the 5 SEQs given are not dead messages") {
			t.Fatalf("redrive of a list: %v", err)
		}
		out, _, err = run(t.Context(), args("dead", "discard", "--all", "--yes")...)
		if err != nil || !strings.Contains(out, "discarded 1 dead message(s)") {
			t.Fatalf("discard --all: %q, %v", out, err)
		}
		if dead, pending := d.count("dead_at IS NOT NULL"), d.count("dead_at IS NULL"); dead != 0 || pending != 6 {
			t.Fatalf("after discard --all: %d dead, %d pending; want 0 and 6", dead, pending)
		}
	}
	// sqlDB is a db on conn, a database/sql pool (SQLite, MySQL).
	sqlDB := func(t *testing.T, conn *sql.DB, args []string, now string) db {
		return db{args: args, now: now, exec: func(q string) error { _, err := conn.Exec(q); return err },
			count: func(w string) (n int) {
				testenv.Must(t, conn.QueryRow("SELECT count(*) FROM txbox_outbox WHERE "+w).Scan(&n), "count")
				return n
			},
			id: func(topic string) (id int64) {
				testenv.Must(t, conn.QueryRow("SELECT id FROM txbox_outbox WHERE topic = ?", topic).Scan(&id), "id of %q", topic)
				return id
			}}
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		args, conn := migratedSQLite(t, "bulk.db")
		bulk(t, sqlDB(t, conn, args, "1"))
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		args, conn := migratedMySQL(t)
		bulk(t, sqlDB(t, conn, args, "UTC_TIMESTAMP(6)"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		admin, schema := pgSchema(t)
		args := []string{"--db", testenv.PostgresURL(), "--schema", schema}
		mustRun(t, append([]string{"migrate", "up"}, args...)...)
		ctx := context.Background()
		in := func(q string) string { return strings.ReplaceAll(q, "txbox_outbox", schema+".txbox_outbox") }
		bulk(t, db{args: args, now: "now()", exec: func(q string) error { _, err := admin.Exec(ctx, in(q)); return err },
			count: func(w string) (n int) {
				testenv.Must(t, admin.QueryRow(ctx, in("SELECT count(*) FROM txbox_outbox WHERE "+w)).Scan(&n), "count")
				return n
			},
			id: func(topic string) (id int64) {
				testenv.Must(t, admin.QueryRow(ctx, in("SELECT id FROM txbox_outbox WHERE topic = $1"), topic).Scan(&id), "id of %q", topic)
				return id
			}})
	})
}
