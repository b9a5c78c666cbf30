package cli_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/txbox/txbox/tests/testenv"
)

// TestDeadFilters, on SQLite, MariaDB and PostgreSQL: dead list, redrive
// and discard choose rows by --topic, --key, --error and --since; a list
// cut at --limit says so and pages on with --after; --dry-run changes
// nothing; a filtered action off a terminal needs --yes; pending list
// filters by --error and pages too.
func TestDeadFilters(t *testing.T) {
	t.Parallel()
	type db struct {
		args     []string
		exec     func(q string) error
		count    func(where string) int
		now, old string // the dialect's "dead at" values: now, and two days ago
	}
	check := func(t *testing.T, d db) {
		run := func(args ...string) string { return mustRun(t, append(args, d.args...)...) }
		insert := func(topic, key, lastErr, deadAt string) {
			t.Helper()
			k := "NULL"
			if key != "" {
				k = "'" + key + "'"
			}
			attempts := "0"
			if lastErr != "" {
				attempts = "3"
			}
			le := "NULL"
			if lastErr != "" {
				le = "'" + lastErr + "'"
			}
			testenv.Must(t, d.exec(`INSERT INTO txbox_outbox (topic, ordering_key, payload, attempts, last_error, dead_at)
				VALUES ('`+topic+`', `+k+`, 'x', `+attempts+`, `+le+`, `+deadAt+`)`), "insert")
		}
		for range 3 {
			insert("orders.a", "", "no JetStream stream captures subject orders.a", d.now)
		}
		insert("orders.b", "k1", "publish timeout", d.now)
		insert("orders.c", "", "publish timeout", d.old)
		insert("orders.a", "", "", "NULL")                // pending
		insert("orders.d", "", "publish timeout", "NULL") // retrying

		has := func(out string, want ...string) {
			t.Helper()
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Fatalf("output lacks %q:\n%s", w, out)
				}
			}
		}
		lines := func(out string) int { return strings.Count(out, "\n") }
		if out := run("dead", "list", "--topic", "orders.a"); lines(out) != 4 || strings.Contains(out, "orders.b") {
			t.Fatalf("dead list --topic orders.a:\n%s", out)
		}
		if out := run("dead", "list", "--error", "timeout"); lines(out) != 3 || !strings.Contains(out, "orders.b") || !strings.Contains(out, "orders.c") {
			t.Fatalf("dead list --error timeout:\n%s", out)
		}
		if out := run("dead", "list", "--error", "timeout", "--since", "1h"); lines(out) != 2 || strings.Contains(out, "orders.c") {
			t.Fatalf("dead list --error timeout --since 1h (orders.c went dead two days ago):\n%s", out)
		}
		if out := run("dead", "list", "--key", "k1"); lines(out) != 2 || !strings.Contains(out, "orders.b") {
			t.Fatalf("dead list --key k1:\n%s", out)
		}
		first := run("dead", "list", "--limit", "3")
		has(first, "cut at --limit 3: more dead messages match; next page: --after ")
		after := strings.TrimSuffix(first[strings.LastIndex(first, "--after ")+len("--after "):], ")\n")
		rest := run("dead", "list", "--limit", "3", "--after", after)
		if lines(rest) != 3 || strings.Contains(rest, "cut at") || !strings.Contains(rest, "orders.c") {
			t.Fatalf("second page after %s:\n%s", after, rest)
		}
		if out := run("dead", "list"); strings.Contains(out, "cut at") {
			t.Fatalf("an uncut list says it was cut:\n%s", out)
		}

		has(run("dead", "redrive", "--topic", "orders.a", "--dry-run"), "would redrive 3 dead message(s)")
		if n := d.count("dead_at IS NOT NULL"); n != 5 {
			t.Fatalf("after --dry-run: %d dead, want 5", n)
		}
		ctx := context.Background()
		if _, _, err := run2(ctx, append([]string{"dead", "redrive", "--topic", "orders.a"}, d.args...)...); err == nil || !strings.Contains(err.Error(), "--yes") {
			t.Fatalf("a filtered redrive off a terminal without --yes: %v", err)
		}
		has(run("dead", "redrive", "--topic", "orders.a", "--yes"), "redrove 3 dead message(s)")
		if dead, a := d.count("dead_at IS NOT NULL"), d.count("dead_at IS NULL AND topic = 'orders.a'"); dead != 2 || a != 4 {
			t.Fatalf("after the redrive: %d dead (want 2), %d pending of orders.a (want 4)", dead, a)
		}
		has(run("dead", "discard", "--error", "timeout", "--since", "1h", "--yes"), "discarded 1 dead message(s)")
		if n := d.count("dead_at IS NOT NULL AND topic = 'orders.c'"); n != 1 || d.count("topic = 'orders.b'") != 0 {
			t.Fatalf("discard --error timeout --since 1h did not discard orders.b alone")
		}

		if out := run("pending", "list", "--error", "timeout"); lines(out) != 2 || !strings.Contains(out, "orders.d") {
			t.Fatalf("pending list --error timeout:\n%s", out)
		}
		p := run("pending", "list", "--limit", "2")
		has(p, "cut at --limit 2: more undelivered messages match; next page: --after ")
	}
	sqlDB := func(t *testing.T, conn *sql.DB, args []string, now, old string) db {
		return db{args: args, now: now, old: old, exec: func(q string) error { _, err := conn.Exec(q); return err },
			count: func(w string) (n int) {
				testenv.Must(t, conn.QueryRow("SELECT count(*) FROM txbox_outbox WHERE "+w).Scan(&n), "count")
				return n
			}}
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		args, conn := migratedSQLite(t, "filters.db")
		micros := "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"
		check(t, sqlDB(t, conn, args, micros, micros+" - 172800000000"))
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		args, conn := migratedMySQL(t)
		check(t, sqlDB(t, conn, args, "UTC_TIMESTAMP(6)", "UTC_TIMESTAMP(6) - INTERVAL 2 DAY"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		admin, schema := pgSchema(t)
		args := []string{"--db", testenv.PostgresURL(), "--schema", schema}
		mustRun(t, append([]string{"migrate", "up"}, args...)...)
		ctx := context.Background()
		in := func(q string) string { return strings.ReplaceAll(q, "txbox_outbox", schema+".txbox_outbox") }
		check(t, db{args: args, now: "now()", old: "now() - interval '2 days'",
			exec: func(q string) error { _, err := admin.Exec(ctx, in(q)); return err },
			count: func(w string) (n int) {
				testenv.Must(t, admin.QueryRow(ctx, in("SELECT count(*) FROM txbox_outbox WHERE "+w)).Scan(&n), "count")
				return n
			}})
	})
}

// run2 is run, named apart from the closures that shadow it.
var run2 = run
