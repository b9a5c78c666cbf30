package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/tests/testenv"
)

// pending list --scheduled lists the scheduled messages not due yet apart
// from the due ones, with their due times, escaped, on every database: a
// message due now, one retrying later and a dead one are left out.
func TestPendingListScheduled(t *testing.T) {
	t.Parallel()
	due := time.Date(2999, 1, 2, 3, 4, 5, 0, time.UTC)
	const key = "c-9\u202ekey" // a bidi override: the table's checks refuse control characters only
	for _, c := range []struct {
		name string
		open func(t *testing.T) (args []string, exec func(q string, args ...any))
		rows string // five rows: (message_id, ordering_key, payload, attempts, next_attempt_at, dead_at, topic); $1 the key, $2 the due time
	}{
		{"sqlite", func(t *testing.T) ([]string, func(string, ...any)) {
			args, conn := migratedSQLite(t, "sched.db")
			return args, func(q string, a ...any) {
				_, err := conn.Exec(strings.ReplaceAll(q, "$", "?"), a...)
				testenv.Must(t, err, "insert")
			}
		}, `('later', $1, x'00', 0, $2, NULL, 'payment.reminder'), ('now', NULL, x'00', 0, NULL, NULL, 'payment.reminder'), ('past', NULL, x'00', 0, 1000000, NULL, 'payment.reminder'),
			('retry', NULL, x'00', 2, $2, NULL, 'payment.reminder'), ('dead', NULL, x'00', 5, $2, 1, 'payment.reminder')`},
		{"mysql", func(t *testing.T) ([]string, func(string, ...any)) {
			args, conn := migratedMySQL(t)
			return args, func(q string, a ...any) {
				q = strings.NewReplacer("$1", "?", "$2", "?").Replace(q)
				_, err := conn.Exec(q, a[0], a[1], a[1], a[1]) // positional: the due time three times
				testenv.Must(t, err, "insert")
			}
		}, `('later', $1, x'00', 0, $2, NULL, 'payment.reminder'), ('now', NULL, x'00', 0, NULL, NULL, 'payment.reminder'), ('past', NULL, x'00', 0, '2001-01-01', NULL, 'payment.reminder'),
			('retry', NULL, x'00', 2, $2, NULL, 'payment.reminder'), ('dead', NULL, x'00', 5, $2, UTC_TIMESTAMP(6), 'payment.reminder')`},
		{"postgres", func(t *testing.T) ([]string, func(string, ...any)) {
			admin, schema := pgSchema(t)
			args := []string{"--db", testenv.PostgresURL(), "--schema", schema}
			mustRun(t, append([]string{"migrate", "up"}, args...)...)
			return args, func(q string, a ...any) {
				_, err := admin.Exec(context.Background(), strings.Replace(q, "txbox_outbox", schema+".txbox_outbox", 1), a...)
				testenv.Must(t, err, "insert")
			}
		}, `('later', $1, '\x00', 0, $2, NULL, 'payment.reminder'), ('now', NULL, '\x00', 0, NULL, NULL, 'payment.reminder'), ('past', NULL, '\x00', 0, '2001-01-01Z', NULL, 'payment.reminder'),
			('retry', NULL, '\x00', 2, $2, NULL, 'payment.reminder'), ('dead', NULL, '\x00', 5, $2, now(), 'payment.reminder')`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args, exec := c.open(t)
			var at any = due
			switch c.name {
			case "sqlite":
				at = due.UnixMicro()
			case "mysql":
				at = due.Format("2006-01-02 15:04:05")
			}
			exec(`INSERT INTO txbox_outbox (message_id, ordering_key, payload, attempts, next_attempt_at, dead_at, topic) VALUES `+c.rows, key, at)

			out := mustRun(t, append([]string{"pending", "list", "--scheduled"}, args...)...)
			noRawControls(t, "pending list --scheduled", out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "SEQ") || !strings.Contains(lines[0], "DUE IN") ||
				!strings.Contains(lines[1], `c-9\u202ekey`) || !strings.Contains(lines[1], "payment.reminder") || !strings.Contains(lines[1], "2999-01-02T03:04:05Z") {
				t.Fatalf("pending list --scheduled, want the one message not due yet with its due time, escaped:\n%s", out)
			}
			// The full list has them all, the scheduled one among them.
			if all := mustRun(t, append([]string{"pending", "list"}, args...)...); strings.Count(all, "\n") != 5 || !strings.Contains(all, "scheduled") {
				t.Errorf("pending list, want four messages and the header:\n%s", all)
			}

			var js []struct {
				ID    string     `json:"message_id"`
				State string     `json:"state"`
				Next  *time.Time `json:"next_attempt_at"`
			}
			out = mustRun(t, append([]string{"pending", "list", "--scheduled", "--json"}, args...)...)
			testenv.Must(t, json.Unmarshal([]byte(out), &js), "--json %s", out)
			if len(js) != 1 || js[0].ID != "later" || js[0].State != "scheduled" || js[0].Next == nil || !js[0].Next.Equal(due) {
				t.Errorf("pending list --scheduled --json: %s", out)
			}

			if out := mustRun(t, append([]string{"pending", "list", "--scheduled", "--topic", "other"}, args...)...); !strings.Contains(out, "no scheduled messages") {
				t.Errorf("pending list --scheduled --topic other, want none:\n%s", out)
			}
			if _, _, err := run(t.Context(), append([]string{"pending", "list", "--scheduled", "--dead"}, args...)...); err == nil {
				t.Errorf("pending list --scheduled --dead: no error")
			}
		})
	}
}
