package cli_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// `txbox relay --stores FILE --db URL` relays the tables of two PostgreSQL
// schemas (listed in the file, with a password in their URL) and a SQLite
// database (--db) from one process: every row of each is delivered, the
// logs name each store once and never the password, and the final stats
// line counts the three stores' messages.
func TestRelayGroupStoresFile(t *testing.T) {
	t.Parallel()
	admin, s1 := pgSchema(t)
	_, s2 := pgSchema(t)
	testenv.NATS(t)
	pgURL := strings.Replace(testenv.PostgresURL(), "postgres@", "postgres:"+secret+"@", 1)
	dir := t.TempDir()
	sqlitePath := filepath.Join(dir, "app.db")
	file := filepath.Join(dir, "stores.json")
	testenv.Must(t, os.WriteFile(file, []byte(fmt.Sprintf(`{"stores": [
		{"name": "acme", "db": %q, "schema": %q},
		{"name": "globex", "db": %q, "schema": %q}
	]}`, pgURL, s1, pgURL, s2)), 0o600), "write stores file")

	prefix := testenv.Subject()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(ctx, []string{"relay", "--migrate", "--stores", file, "--db", "sqlite://" + sqlitePath,
			"--broker", testenv.NATSURL(), "--stream", strings.ToUpper(testenv.Name("GRP")), "--stream-subjects", prefix + ">",
			"--poll-interval", "50ms", "--stats-interval", "100ms", "--db-budget", "1"}, &out, &errOut)
	}()
	testenv.Await(t, "3 stores added", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("relay exited early: %v\n%s", err, errOut.String())
		default:
		}
		return strings.Count(errOut.String(), `msg="store added"`) >= 3, "stderr:\n" + errOut.String()
	})
	lite, err := sql.Open("sqlite", txboxsql.SQLiteDSN(sqlitePath))
	testenv.Must(t, err, "open sqlite")
	defer lite.Close()
	const n = 25
	for i := range n {
		for _, s := range []string{s1, s2} {
			_, err := admin.Exec(ctx, `INSERT INTO `+s+`.txbox_outbox (topic, payload) VALUES ($1, $2)`, prefix+s, fmt.Sprintf("m%d", i))
			testenv.Must(t, err, "insert")
		}
		_, err := lite.Exec(`INSERT INTO txbox_outbox (topic, payload) VALUES (?, ?)`, prefix+"lite", fmt.Sprintf("m%d", i))
		testenv.Must(t, err, "insert sqlite")
	}
	testenv.Await(t, "every store's rows delivered", func() (bool, string) {
		var left, l2, l3 int
		testenv.Must(t, admin.QueryRow(ctx, `SELECT count(*) FROM `+s1+`.txbox_outbox WHERE published_at IS NULL`).Scan(&left), "count")
		testenv.Must(t, admin.QueryRow(ctx, `SELECT count(*) FROM `+s2+`.txbox_outbox WHERE published_at IS NULL`).Scan(&l2), "count")
		testenv.Must(t, lite.QueryRow(`SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL`).Scan(&l3), "count")
		return left+l2+l3 == 0, fmt.Sprintf("%d, %d, %d rows pending", left, l2, l3)
	})
	cancel()
	select {
	case err := <-done:
		testenv.Must(t, err, "relay")
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop")
	}
	logs := errOut.String()
	checkRedacted(t, "group relay logs", out.String()+logs, `msg="store added" store=acme db="postgres://postgres:xxxxx@`)
	for _, store := range []string{"store=acme", "store=globex", "store=" + sqlitePath} {
		if !strings.Contains(logs, `msg="store added" `+store) {
			t.Errorf("no store added line for %s:\n%s", store, logs)
		}
	}
	if !strings.Contains(out.String(), fmt.Sprintf("relay: 3 stores: published %d", 3*n)) {
		t.Errorf("stdout lacks the final stats line with %d published:\n%s", 3*n, out.String())
	}
}

// A stores file with a mistake is an error at start naming it, before any
// database is opened.
func TestRelayGroupStoresFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ file, want string }{
		{`{"stores": []}`, "lists no stores"},
		{`{"stores": [{"name": "a", "db": "sqlite://a.db", "tabel": "x"}]}`, `unknown field "tabel"`},
		{`{"stores": [{"name": "a", "db": "sqlite://a.db"}, {"name": "a", "db": "sqlite://b.db"}]}`, `two stores are named "a"`},
		{`{"stores": [{"name": "a", "db": "ftp://x"}]}`, `store "a": db "ftp://x": unsupported database URL`},
		{`{"stores": [{"name": "a", "db": "sqlite://a.db", "schema": "s"}]}`, "a schema is only supported on PostgreSQL"},
		{`{"stores": [{"name": "a", "db": "postgres://u:` + secret + `@h/db", "table": "bad name"}]}`, "outbox table"},
		// One object and nothing after it.
		{`{"stores": [{"name": "a", "db": "sqlite://a.db"}]}` + "\n" + `{"stores": [{"name": "b", "db": "sqlite://b.db"}]}`, "line 2: more after the JSON object"},
		{`{"stores": [{"name": "a", "db": "sqlite://a.db"}]} x`, "line 1: more after the JSON object"},
		{`{"stores": [{"name": "a", "db": "sqlite://a.db"}]}]`, "more after the JSON object"},
		{`{"stores": [{"name": "a", "db": "sqlite://a.db"}], "stores": [{"name": "b", "db": "sqlite://b.db"}]}`, `repeated field "stores"`},
		{`[{"name": "a", "db": "sqlite://a.db"}]`, "want a JSON object"},
		{`{"stores": [` + "\n" + `{"name": "a", "db": "sqlite://a.db"},` + "\n" + `{"name": "b", "db": 3}]}`, "store 2 (line 3)"},
		// Two stores of one table, however spelled.
		{`{"stores": [` + "\n" + `{"name": "a", "db": "sqlite://a.db"},` + "\n" + `{"name": "b", "db": "sqlite:a.db", "table": "txbox_outbox"}]}`,
			`stores "a" (line 2) and "b" (line 3) are the same table`},
		{`{"stores": [{"name": "a", "db": "postgres://u:` + secret + `@H:5432/db?sslmode=disable"}, {"name": "b", "db": "postgres://v@h/db", "schema": "public"}]}`,
			`stores "a" (line 1) and "b" (line 1) are the same table (postgres h:5432/db schema public table txbox_outbox)`},
		{`{"stores": [{"name": "a", "db": "mysql://u@h/db", "table": "t"}, {"name": "b", "db": "mariadb://v@h:3306/db", "table": "t"}]}`,
			`are the same table (mysql h:3306/db table t)`},
	} {
		file := filepath.Join(dir, testenv.Name("stores")+".json")
		testenv.Must(t, os.WriteFile(file, []byte(tc.file), 0o600), "write")
		// The deadline only ends a relay that accepted the file and waits
		// for the unreachable broker.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, errOut, err := run(ctx, "relay", "--stores", file, "--broker", "nats://127.0.0.1:1")
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.file, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error()+errOut, secret) {
			t.Errorf("%s: the error shows the password: %v", tc.file, err)
		}
	}
	// Flags that cannot apply to a relay of several stores are refused
	// rather than ignored.
	file := filepath.Join(dir, "ok.json")
	testenv.Must(t, os.WriteFile(file, []byte(`{"stores": [{"name": "a", "db": "sqlite://a.db"}]}`), 0o600), "write")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stores", file, "--schema", "acme"}, "--schema applies to the stores of --db, and none is given"},
		{[]string{"--stores", file, "--table", "events"}, "--table applies to the stores of --db"},
	} {
		_, _, err := run(context.Background(), append([]string{"relay", "--broker", "nats://127.0.0.1:1"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
