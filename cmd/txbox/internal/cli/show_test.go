package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	"github.com/txbox/txbox/tests/testenv"
)

// TestShowFindsAnyState, on SQLite, MariaDB and PostgreSQL: txbox show
// finds a message by message id or SEQ whether it is pending, retrying,
// parked, dead or delivered, and says why it is there; txbox stats counts
// the last minute's delivered and dead messages; a redriven row shows its
// error as the previous one.
func TestShowFindsAnyState(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, args []string, exec func(string) error, seqOf func(id string) string, now string) {
		rows := []struct{ id, key, attempts, lastErr, next, dead, published string }{
			{"m-pending", "", "0", "NULL", "NULL", "NULL", "NULL"},
			{"m-retrying", "", "2", "'publish timeout'", now, "NULL", "NULL"},
			{"m-dead", "k", "10", "'no JetStream stream captures subject orders.x'", "NULL", now, "NULL"},
			{"m-parked", "k", "0", "NULL", "NULL", "NULL", "NULL"},
			{"m-delivered", "", "1", "NULL", "NULL", "NULL", now},
		}
		for _, r := range rows {
			key := "NULL"
			if r.key != "" {
				key = "'" + r.key + "'"
			}
			testenv.Must(t, exec(`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, attempts, last_error, next_attempt_at, dead_at, published_at)
				VALUES ('`+r.id+`', 'orders.x', `+key+`, 'body of `+r.id+`', `+r.attempts+`, `+r.lastErr+`, `+r.next+`, `+r.dead+`, `+r.published+`)`), "insert %s", r.id)
		}
		deadSeq := seqOf("m-dead")
		for _, c := range []struct{ ref, state, why string }{
			{"m-pending", "pending", "never tried yet"},
			{"m-retrying", "retrying", "the broker rejected it 2 time(s)"},
			{"m-dead", "dead", "the relay no longer tries it: txbox dead redrive " + deadSeq},
			{"m-parked", "parked", "waits behind dead message SEQ " + deadSeq + " of its key"},
			{"m-delivered", "delivered", "delivered at "},
			{seqOf("m-retrying"), "retrying", "publish timeout"},
		} {
			out := mustRun(t, append([]string{"show", c.ref}, args...)...)
			flat := strings.Join(strings.Fields(out), " ")
			for _, want := range []string{"state " + c.state + " why", c.why, "body of "} {
				if !strings.Contains(flat, want) {
					t.Fatalf("txbox show %s lacks %q:\n%s", c.ref, want, out)
				}
			}
		}
		if _, _, err := run(context.Background(), append([]string{"show", "m-never"}, args...)...); err == nil || !strings.Contains(err.Error(), "no row of outbox table") {
			t.Fatalf("show of an unknown id: %v", err)
		}
		// txbox stats counts the last minute's deliveries and dead rows.
		var stats struct {
			Delivered *int64 `json:"delivered_last_minute"`
			Dead      *int64 `json:"dead_last_minute"`
		}
		testenv.Must(t, json.Unmarshal([]byte(mustRun(t, append([]string{"stats", "--json"}, args...)...)), &stats), "stats --json")
		if stats.Delivered == nil || *stats.Delivered != 1 || stats.Dead == nil || *stats.Dead != 1 {
			t.Fatalf("stats: delivered %v, dead %v in the last minute; want 1 and 1", stats.Delivered, stats.Dead)
		}
		if out := mustRun(t, append([]string{"stats"}, args...)...); !strings.Contains(strings.Join(strings.Fields(out), " "), "delivered last minute 1") {
			t.Fatalf("stats lacks the last minute's deliveries:\n%s", out)
		}
		// A redriven row keeps its error, shown as the previous one.
		mustRun(t, append([]string{"dead", "redrive", deadSeq}, args...)...)
		out := mustRun(t, append([]string{"show", "m-dead"}, args...)...)
		flat := strings.Join(strings.Fields(out), " ")
		if !strings.Contains(flat, "state pending") || !strings.Contains(flat, "previous error no JetStream stream captures subject orders.x (before a redrive") ||
			strings.Contains(flat, "last error") {
			t.Fatalf("txbox show of a redriven row does not show its error as the previous one:\n%s", out)
		}
		testenv.Must(t, exec(`UPDATE txbox_outbox SET published_at = `+now+` WHERE message_id = 'm-dead'`), "deliver m-dead")
		out = mustRun(t, append([]string{"show", "m-dead"}, args...)...)
		if flat := strings.Join(strings.Fields(out), " "); !strings.Contains(flat, "state delivered") || !strings.Contains(flat, "previous error no JetStream") || strings.Contains(flat, "last error") {
			t.Fatalf("txbox show of a row delivered after a redrive does not show its error as the previous one:\n%s", out)
		}
	}
	sqlSeq := func(t *testing.T, conn *sql.DB) func(string) string {
		return func(id string) (seq string) {
			testenv.Must(t, conn.QueryRow("SELECT CAST(id AS CHAR(20)) FROM txbox_outbox WHERE message_id = ?", id).Scan(&seq), "seq of %s", id)
			return seq
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		args, conn := migratedSQLite(t, "show.db")
		check(t, args, func(q string) error { _, err := conn.Exec(q); return err }, sqlSeq(t, conn),
			"CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)")
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		args, conn := migratedMySQL(t)
		check(t, args, func(q string) error { _, err := conn.Exec(q); return err }, sqlSeq(t, conn), "UTC_TIMESTAMP(6)")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		admin, schema := pgSchema(t)
		args := []string{"--db", testenv.PostgresURL(), "--schema", schema}
		mustRun(t, append([]string{"migrate", "up"}, args...)...)
		ctx := context.Background()
		in := func(q string) string { return strings.ReplaceAll(q, "txbox_outbox", schema+".txbox_outbox") }
		check(t, args, func(q string) error { _, err := admin.Exec(ctx, in(q)); return err },
			func(id string) (seq string) {
				testenv.Must(t, admin.QueryRow(ctx, in("SELECT id::text FROM txbox_outbox WHERE message_id = $1"), id).Scan(&seq), "seq of %s", id)
				return seq
			}, "now()")
	})
}
