package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/tests/testenv"
)

// txbox stats on PostgreSQL shows the table's upkeep: its size, its live
// and dead row versions, its last VACUUM, and the oldest snapshot of the
// database, here a transaction left open by another session, named by its
// pid and application name. On a cluster of the test's own, without
// autovacuum, so that nothing else holds a snapshot.
func TestStatsTableHealth(t *testing.T) {
	t.Parallel()
	c := testenv.PrivatePostgres(t, "autovacuum=off")
	ctx := context.Background()
	mustRun(t, "migrate", "up", "--db", c.URL)
	conn, err := pgx.Connect(ctx, c.URL)
	testenv.Must(t, err, "connect")
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO txbox_outbox (topic, payload) SELECT 't', 'x' FROM generate_series(1, 200)`)
	testenv.Must(t, err, "insert")
	_, err = conn.Exec(ctx, `UPDATE txbox_outbox SET published_at = now() WHERE id <= 50`)
	testenv.Must(t, err, "deliver")
	_, err = conn.Exec(ctx, `ANALYZE txbox_outbox`)
	testenv.Must(t, err, "analyze")

	type table struct {
		SizeBytes      int64    `json:"size_bytes"`
		LiveRows       int64    `json:"live_rows"`
		DeadRows       int64    `json:"dead_rows"`
		SinceVacuum    *float64 `json:"since_vacuum_seconds"`
		OldestSnapshot *struct {
			Kind, Holder, State string
			AgeSeconds          float64 `json:"age_seconds"`
		} `json:"oldest_snapshot"`
	}
	stats := func() (table, string) {
		var got struct{ Table *table }
		js := mustRun(t, "stats", "--db", c.URL, "--json")
		testenv.Must(t, json.Unmarshal([]byte(js), &got), "stats --json: %s", js)
		if got.Table == nil {
			t.Fatalf("stats --json on PostgreSQL has no table:\n%s", js)
		}
		return *got.Table, mustRun(t, "stats", "--db", c.URL)
	}

	tb, text := stats()
	if tb.SizeBytes <= 0 || tb.LiveRows != 200 || tb.SinceVacuum != nil || tb.OldestSnapshot != nil {
		t.Fatalf("table %+v, want a size, 200 live rows, never vacuumed, no snapshot held", tb)
	}
	if !regexp.MustCompile(`(?m)^row versions\s+200 live, \d+ to vacuum\s+\(never vacuumed; PostgreSQL's estimate, not messages\)$`).MatchString(text) ||
		!regexp.MustCompile(`(?m)^oldest snapshot\s+none$`).MatchString(text) {
		t.Fatalf("stats:\n%s", text)
	}

	holder, err := pgx.Connect(ctx, c.URL+"&application_name=report-job")
	testenv.Must(t, err, "connect")
	defer holder.Close(ctx)
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	testenv.Must(t, err, "begin")
	defer tx.Rollback(ctx)
	var pid string
	testenv.Must(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()::text").Scan(&pid), "pid")
	_, err = conn.Exec(ctx, `VACUUM txbox_outbox`)
	testenv.Must(t, err, "vacuum")

	tb, text = stats()
	o := tb.OldestSnapshot
	if o == nil || o.Kind != "transaction" || o.Holder != pid+" (report-job)" || o.State != "idle in transaction" || o.AgeSeconds <= 0 {
		t.Fatalf("oldest snapshot %+v, want transaction %s (report-job), idle in transaction", o, pid)
	}
	if tb.SinceVacuum == nil {
		t.Fatalf("table %+v: no VACUUM seen after one", tb)
	}
	for _, want := range []string{
		`(?m)^oldest snapshot\s+\S+\s+\(transaction ` + pid + ` \(report-job\), idle in transaction; \d+ transactions behind\)$`,
		`(?m)^row versions\s+\d+ live, \d+ to vacuum\s+\(last VACUUM \S+ ago; PostgreSQL's estimate, not messages\)$`,
		`(?m)^table size\s+\d+ kB\s+\(indexes \d+ kB\)$`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Fatalf("stats lacks %s:\n%s", want, text)
		}
	}
}

// Off PostgreSQL, stats has no table section.
func TestStatsTableOnlyOnPostgres(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
	mustRun(t, "migrate", "up", "--db", db)
	if out := mustRun(t, "stats", "--db", db); strings.Contains(out, "table size") || strings.Contains(out, "snapshot") {
		t.Fatalf("stats on SQLite:\n%s", out)
	}
	if out := mustRun(t, "stats", "--db", db, "--json"); strings.Contains(out, `"table`) {
		t.Fatalf("stats --json on SQLite:\n%s", out)
	}
}
