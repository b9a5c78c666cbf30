package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// run runs txbox with args and returns its stdout, stderr and error.
func run(ctx context.Context, args ...string) (string, string, error) {
	var out, errOut testenv.Buffer
	err := cli.Run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// runUntil runs txbox with args until its stderr contains want (then it
// ends the run's context) or it returns by itself, however long either
// takes, and returns its stderr and error.
func runUntil(want string, args ...string) (string, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	go func() { done <- cli.Run(ctx, args, &out, &errOut) }()
	for {
		select {
		case err := <-done:
			return errOut.String(), err
		case <-time.After(10 * time.Millisecond):
			if strings.Contains(errOut.String(), want) {
				cancel()
				err := <-done
				return errOut.String(), err
			}
		}
	}
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, errOut, err := run(ctx, args...)
	if err != nil {
		t.Fatalf("txbox %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

var verdict = regexp.MustCompile(`^orders committed (\d+), events delivered (\d+), lost (\d+), phantom (\d+), applied twice (\d+)$`)

func TestDemo(t *testing.T) {
	t.Parallel()
	const orders = 300 // every 7th rolled back: 258 committed
	out := mustRun(t, "demo", "--orders", strconv.Itoa(orders), "--producers", "3", "--progress", "50ms", "--dir", filepath.Join(t.TempDir(), "shop"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	m := verdict.FindStringSubmatch(last)
	if m == nil {
		t.Fatalf("last line %q is not the verdict; output:\n%s", last, out)
	}
	want := strconv.Itoa(orders - orders/7)
	if m[1] != want || m[2] != want || m[3] != "0" || m[4] != "0" || m[5] != "0" {
		t.Fatalf("verdict %q: want %s committed and delivered, lost 0, phantom 0, applied twice 0", last, want)
	}
	for _, s := range []string{"relay stopped mid-run", "relay restarted", "progress: orders committed"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

// A demo stopped by a signal (its context ends) says so and exits 0, not
// with the error of the order it was placing.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"demo", "--orders", "1000000", "--progress", "50ms", "--dir", filepath.Join(t.TempDir(), "shop")}, &out, &errOut)
	}()
	for !strings.Contains(out.String(), "progress: orders committed") {
		select {
		case code := <-done:
			t.Fatalf("demo exited with %d before it placed orders:\n%s%s", code, out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(out.String(), "demo interrupted") || strings.Contains(errOut.String(), "error") {
			t.Fatalf("interrupted demo: exit %d, want 0 and a line saying so:\n%s%s", code, out.String(), errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("demo did not stop")
	}
}

func TestDemoRefusesUsedDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustRun(t, "migrate", "up", "--db", "sqlite://"+filepath.Join(dir, "x.db"))
	_, _, err := run(context.Background(), "demo", "--dir", dir)
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("demo in a used dir: err = %v, want 'not empty'", err)
	}
}

// checkStatus asserts the migrate status table lists the outbox migration
// as applied (or pending).
func checkStatus(t *testing.T, out string, applied bool) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "TARGET") || !strings.Contains(lines[0], "APPLIED AT") {
		t.Fatalf("status is not a table:\n%s", out)
	}
	f := strings.Fields(lines[1])
	if len(f) != 4 || f[0] != "outbox:txbox_outbox" || f[1] != "001" {
		t.Fatalf("status row %q: want outbox:txbox_outbox 001 name applied-at", lines[1])
	}
	if applied {
		if _, err := time.Parse(time.RFC3339, f[3]); err != nil {
			t.Fatalf("status row %q: applied-at: %v", lines[1], err)
		}
	} else if f[3] != "pending" {
		t.Fatalf("status row %q: want pending", lines[1])
	}
}

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
	if out := mustRun(t, "migrate", "up", "--db", db, "--no-outbox"); !strings.Contains(out, "up to date") {
		t.Fatalf("migrate up --no-outbox: %s", out)
	}
	checkStatus(t, mustRun(t, "migrate", "status", "--db", db), false)
	if out := mustRun(t, "migrate", "up", "--db", db); !strings.Contains(out, "applied outbox:txbox_outbox 001") {
		t.Fatalf("migrate up: %s", out)
	}
	if out := mustRun(t, "migrate", "up", "--db", db); !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate up: %s", out)
	}
	checkStatus(t, mustRun(t, "migrate", "status", "--db", db), true)
}

func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	admin, schema := pgSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testenv.PostgresURL()
	if out := mustRun(t, "migrate", "up", "--db", db, "--schema", schema); !strings.Contains(out, "applied outbox:txbox_outbox 001") {
		t.Fatalf("migrate up: %s", out)
	}
	checkStatus(t, mustRun(t, "migrate", "status", "--db", db, "--schema", schema), true)
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'txbox_outbox'`, schema).Scan(&n); err != nil || n != 1 {
		t.Fatalf("outbox table in schema %s: n=%d err=%v", schema, n, err)
	}
}

// TestMigrateLockTimeout: migrate up beside a transaction that uses the
// outbox table gives up after --lock-timeout and --lock-retries, naming
// the holder, escaped; the flags refuse what makes no sense.
func TestMigrateLockTimeout(t *testing.T) {
	t.Parallel()
	admin, schema := pgSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testenv.PostgresURL()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lock-timeout", "0"}, "--lock-timeout 0: want a duration"},
		{[]string{"--lock-retries", "-1"}, "--lock-retries -1: want 0 or more"},
	} {
		if _, _, err := run(ctx, append([]string{"migrate", "up", "--db", db, "--schema", schema}, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("migrate up %v: err = %v, want %q", c.args, err, c.want)
		}
	}
	mustRun(t, "migrate", "up", "--db", db, "--schema", schema)
	holder, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx))
	if _, err := holder.Exec(ctx, `SET application_name = 'report "job"'`); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "INSERT INTO "+schema+".txbox_outbox (topic, payload) VALUES ('t', 'p')"); err != nil {
		t.Fatal(err)
	}
	var out, errOut testenv.Buffer
	code := cli.Main(ctx, []string{"migrate", "down", "--to", "0", "--force", "--db", db, "--schema", schema, "--lock-timeout", "100ms", "--lock-retries", "1"}, &out, &errOut)
	printed := errOut.String()
	if code != 1 || !strings.Contains(printed, "waited 100ms for a lock on outbox table") || !strings.Contains(printed, "2 time(s)") ||
		!strings.Contains(printed, `("report \"job\"")`) {
		t.Fatalf("migrate down beside a holder (exit %d) printed:\n%s", code, printed)
	}
	if !strings.Contains(printed, "level=WARN") || strings.Count(printed, "level=WARN") != 1 {
		t.Errorf("want one warning, at the first of the two tries:\n%s", printed)
	}
	if st := mustRun(t, "migrate", "status", "--db", db, "--schema", schema); strings.Contains(st, "pending") {
		t.Fatalf("a migration was reverted beside the holder:\n%s", st)
	}
}

func TestMigrateSQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--dialect", "postgres"}, []string{"CREATE TABLE", "txbox_outbox", "bytea"}},
		{[]string{"--dialect", "postgres", "--schema", "shop", "--table", "events"}, []string{"CREATE TABLE", "shop", "events"}},
		{[]string{"--db", "sqlite://nowhere/app.db"}, []string{"CREATE TABLE", "AUTOINCREMENT"}},
		{[]string{"--db", "postgres://nobody@203.0.113.1:1/x"}, []string{"CREATE TABLE", "bytea"}},
		{[]string{"--dialect", "mysql"}, []string{"CREATE TABLE", "SKIP LOCKED"}},
	} {
		out := mustRun(t, append([]string{"migrate", "sql"}, tc.args...)...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("migrate sql %v lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	if _, _, err := run(context.Background(), "migrate", "sql", "--dialect", "oracle"); err == nil || !strings.Contains(err.Error(), "want postgres, sqlite or mysql") {
		t.Errorf("--dialect oracle: err = %v", err)
	}
}

func TestVersionAndHelp(t *testing.T) {
	t.Parallel()
	if out := mustRun(t, "version"); !strings.HasPrefix(out, "txbox ") {
		t.Errorf("version: %q", out)
	}
	for _, args := range [][]string{{"--help"}, {"migrate", "--help"}, {"migrate", "up", "--help"}, {"migrate", "status", "--help"},
		{"migrate", "sql", "--help"}, {"migrate", "down", "--help"}, {"relay", "--help"}, {"demo", "--help"}, {"version", "--help"},
		{"health", "--help"}, {"dead", "--help"}, {"dead", "list", "--help"}, {"dead", "redrive", "--help"}, {"dead", "discard", "--help"}, {"bench", "--help"}} {
		out := mustRun(t, args...)
		if !strings.Contains(out, "Usage:") {
			t.Errorf("txbox %v: no usage:\n%s", args, out)
		}
	}
}

// TestRelayBadConfig checks that bad values fail at start, clearly, before
// any service is touched.
func TestRelayBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch-size", "-1"}, "--batch-size -1: must be a positive integer"},
		{[]string{"--batch-size", "20000"}, "at most 10000"},
		{[]string{"--max-attempts", "0"}, "--max-attempts 0: must be a positive integer"},
		{[]string{"--poll-interval", "abc"}, `invalid argument "abc" for "--poll-interval"`},
		{[]string{"--retention", "-1h"}, "--retention -1h0m0s: must be positive"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--db", "oracle://x"}, "unsupported database URL"},
		{[]string{"--db", "sqlite://"}, "no file name"},
		{[]string{"--broker", "http://x:80"}, "unsupported broker"},
		{[]string{"--stream-subjects", "a.>", "--nats-listen", "nope"}, "--nats-listen"},
		{[]string{"--broker", "nats://127.0.0.1:1", "--table", "bad name"}, "outbox table"},
		{[]string{"--broker", "nats://127.0.0.1:1", "--schema", "s1"}, "only supported on PostgreSQL"},
	} {
		_, _, err := run(context.Background(), append([]string{"relay"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("relay %v: err = %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

// TestRelayBadEnv: TXBOX_* values that do not parse fail at start, naming
// the variable; flags override the environment.
func TestRelayBadEnv(t *testing.T) {
	for _, tc := range []struct{ env, val, want string }{
		{"TXBOX_POLL_INTERVAL", "abc", `TXBOX_POLL_INTERVAL="abc": not a duration`},
		{"TXBOX_BATCH_SIZE", "-5", `TXBOX_BATCH_SIZE="-5": want a positive integer`},
		{"TXBOX_RETENTION", "-2h", `TXBOX_RETENTION="-2h": must be positive`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.val)
			_, _, err := run(context.Background(), "relay", "--broker", "nats://127.0.0.1:1")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s=%s: err = %v, want %q", tc.env, tc.val, err, tc.want)
			}
			var out, errOut bytes.Buffer
			if code := cli.Main(context.Background(), []string{"relay", "--broker", "nats://127.0.0.1:1"}, &out, &errOut); code == 0 ||
				!strings.Contains(errOut.String(), "txbox: error: ") {
				t.Fatalf("Main: exit code %d, stderr %q", code, errOut.String())
			}
		})
	}
}

// pgSchema returns an admin pool on the test database and a fresh schema
// name, dropped when the test ends.
func pgSchema(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
	}
	schema := testenv.Name("txcli")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	return admin, schema
}

// TestRelayDeliversPlainSQLRows runs the relay command against a database
// whose rows were inserted with plain SQL (only topic and payload, the SQL
// contract for other languages) and the NATS server on 4222, then stops it
// by cancelling its context.
func TestRelayDeliversPlainSQLRows(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		dbURL := "sqlite://" + filepath.Join(dir, "app.db")
		mustRun(t, "migrate", "up", "--db", dbURL)
		db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(dir, "app.db")))
		testenv.Must(t, err, "open sqlite")
		t.Cleanup(func() { _ = db.Close() })
		testRelay(t, []string{"--db", dbURL},
			func(topic string, payload []byte) error {
				_, err := db.Exec(`INSERT INTO txbox_outbox (topic, payload) VALUES (?, ?)`, topic, payload)
				return err
			},
			func() (n int, err error) {
				err = db.QueryRow(`SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL`).Scan(&n)
				return n, err
			})
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		db := testenv.MySQL(t)
		var name string
		testenv.Must(t, db.QueryRow("SELECT DATABASE()").Scan(&name), "database name")
		dbArgs := []string{"--db", "mysql://root@127.0.0.1:3306/" + name}
		mustRun(t, append([]string{"migrate", "up"}, dbArgs...)...)
		testRelay(t, dbArgs,
			func(topic string, payload []byte) error {
				_, err := db.Exec(`INSERT INTO txbox_outbox (topic, payload) VALUES (?, ?)`, topic, payload)
				return err
			},
			func() (n int, err error) {
				err = db.QueryRow(`SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL`).Scan(&n)
				return n, err
			})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		admin, schema := pgSchema(t)
		dbArgs := []string{"--db", testenv.PostgresURL(), "--schema", schema}
		mustRun(t, append([]string{"migrate", "up"}, dbArgs...)...)
		ctx := context.Background()
		testRelay(t, dbArgs,
			func(topic string, payload []byte) error {
				_, err := admin.Exec(ctx, `INSERT INTO `+schema+`.txbox_outbox (topic, payload) VALUES ($1, $2)`, topic, payload)
				return err
			},
			func() (n int, err error) {
				err = admin.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.txbox_outbox WHERE published_at IS NULL`).Scan(&n)
				return n, err
			})
	})
}

func testRelay(t *testing.T, dbArgs []string, insertRow func(topic string, payload []byte) error, pending func() (int, error)) {
	nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	stream := strings.ToUpper(testenv.Name("CLI"))
	prefix := testenv.Subject()
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	insert := func(from, to int) {
		for i := from; i < to; i++ {
			testenv.Must(t, insertRow(prefix+"greeting", []byte(fmt.Sprintf("hello %d", i))), "insert row %d", i)
		}
	}
	const n = 40
	insert(0, n/2)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testenv.Buffer
	done := make(chan error, 1)
	go func() {
		args := append([]string{"relay", "--broker", testenv.NATSURL(), "--stream", stream, "--stream-subjects", prefix + ">",
			"--poll-interval", "50ms", "--stats-interval", "100ms"}, dbArgs...)
		done <- cli.Run(ctx, args, &out, &errOut)
	}()

	// The relay creates the stream; then read it from the start.
	var s jetstream.Stream
	testenv.Await(t, "stream "+stream, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("relay exited early: %v\nstderr:\n%s", err, errOut.String())
		default:
		}
		s, err = js.Stream(ctx, stream)
		return err == nil, fmt.Sprintf("%v\nstderr:\n%s", err, errOut.String())
	})
	insert(n/2, n) // while the relay runs
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err, "consumer")
	got := map[string]bool{}
	testenv.Await(t, fmt.Sprintf("%d messages", n), func() (bool, string) {
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(time.Second))
		testenv.Must(t, err, "fetch")
		for m := range batch.Messages() {
			if m.Subject() != prefix+"greeting" {
				t.Errorf("subject %q", m.Subject())
			}
			if m.Headers().Get("Nats-Msg-Id") == "" {
				t.Errorf("message %q has no Nats-Msg-Id", m.Data())
			}
			got[string(m.Data())] = true
		}
		return len(got) >= n, fmt.Sprintf("got %d of %d messages", len(got), n)
	})
	for i := 0; i < n; i++ {
		if !got[fmt.Sprintf("hello %d", i)] {
			t.Errorf("message %d not delivered", i)
		}
	}

	// The broker may hand out a message before the relay has its ack and
	// marks the row: wait for the marks, then stop.
	testenv.Await(t, "every row marked", func() (bool, string) {
		left, err := pending()
		testenv.Must(t, err, "count pending")
		return left == 0, fmt.Sprintf("%d rows pending", left)
	})

	// Cancelling the command's context stops the relay gracefully.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay returned %v\nstderr:\n%s", err, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop after its context was cancelled")
	}
	if !strings.Contains(errOut.String(), "relay stopped") {
		t.Errorf("stderr lacks the stop log:\n%s", errOut.String())
	}
	if !strings.Contains(out.String(), fmt.Sprintf("relay: published %d", n)) {
		t.Errorf("stdout lacks the final stats line with %d published:\n%s\nstderr:\n%s", n, out.String(), errOut.String())
	}
}

// relay without --migrate does not create a SQLite file that is not there
// (a mistyped path would relay from a new empty table forever): it fails
// at once, saying how to create it; with --migrate it creates it.
func TestRelayMissingSQLiteFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "typo.db")
	_, _, err := run(context.Background(), "relay", "--db", "sqlite://"+path, "--broker", "nats://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "the file does not exist") || !strings.Contains(err.Error(), "txbox migrate up creates it") {
		t.Fatalf("relay on a missing file: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("relay created %s: %v", path, err)
	}
}

// emptySQLite creates an empty SQLite file (an unmigrated database: the
// relay opens it, where it refuses a file that is not there) and returns
// its URL.
func emptySQLite(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	testenv.Must(t, os.WriteFile(path, nil, 0o600), "create %s", path)
	return "sqlite://" + path
}

// migratedSQLite migrates a new SQLite file name (txbox migrate up) and
// returns the flags that name it and a connection to it.
func migratedSQLite(t *testing.T, name string) ([]string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	args := []string{"--db", "sqlite://" + path}
	mustRun(t, append([]string{"migrate", "up"}, args...)...)
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	testenv.Must(t, err, "open sqlite")
	t.Cleanup(func() { _ = conn.Close() })
	return args, conn
}

// migratedMySQL migrates the test's own MySQL database (txbox migrate up)
// and returns the flags that name it and a connection to it.
func migratedMySQL(t *testing.T) ([]string, *sql.DB) {
	t.Helper()
	conn := testenv.MySQL(t)
	var name string
	testenv.Must(t, conn.QueryRow("SELECT DATABASE()").Scan(&name), "database name")
	args := []string{"--db", "mysql://root@127.0.0.1:3306/" + name}
	mustRun(t, append([]string{"migrate", "up"}, args...)...)
	return args, conn
}

// migrate down reverts the migrations above --to and refuses, before
// changing anything, to drop an outbox table with undelivered messages;
// --force drops it; migrate up brings everything back.
func TestMigrateDown(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.db")
	db := "sqlite://" + path
	mustRun(t, "migrate", "up", "--db", db, "--inbox-table", "orders_inbox")
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Exec(`INSERT INTO txbox_outbox (topic, payload) VALUES ('t', x'00')`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give --to VERSION"},
		{[]string{"--to", "-1"}, "want 0 or more"},
		{[]string{"--to", "0"}, `outbox table "txbox_outbox" holds 1 undelivered message(s) (pending or dead), which dropping it deletes; --force drops them anyway`},
	} {
		_, _, err := run(context.Background(), append([]string{"migrate", "down", "--db", db, "--inbox-table", "orders_inbox"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("migrate down %v: err = %v, want %q", c.args, err, c.want)
		}
	}
	// As printed: "txbox:" once, though the error came through two layers.
	var out0, errOut testenv.Buffer
	if code := cli.Main(context.Background(), []string{"migrate", "down", "--db", db, "--to", "0"}, &out0, &errOut); code != 1 ||
		strings.Count(errOut.String(), "txbox:") != 1 || !strings.Contains(errOut.String(), ": down to version 0: reverting would lose data: outbox table") {
		t.Fatalf("migrate down --to 0 printed (exit %d):\n%s", code, errOut.String())
	}
	statusAll := mustRun(t, "migrate", "status", "--db", db, "--inbox-table", "orders_inbox")
	if strings.Contains(statusAll, "pending") {
		t.Fatalf("a refused down reverted something:\n%s", statusAll)
	}

	if out := mustRun(t, "migrate", "down", "--db", db, "--to", "1"); !strings.Contains(out, "nothing applied above version 1") {
		t.Fatalf("second migrate down --to 1: %q", out)
	}
	out := mustRun(t, "migrate", "down", "--db", db, "--to", "0", "--force", "--inbox-table", "orders_inbox")
	if out != "reverted inbox:orders_inbox 001 create_inbox\nreverted outbox:txbox_outbox 001 create_outbox\n" {
		t.Fatalf("migrate down --to 0 --force: %q", out)
	}
	var n int
	if err := conn.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name IN ('txbox_outbox', 'orders_inbox')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("tables left after down --to 0: %d (%v)", n, err)
	}
	if out := mustRun(t, "migrate", "up", "--db", db, "--to", "1"); out != "applied outbox:txbox_outbox 001 create_outbox\n" {
		t.Fatalf("migrate up --to 1 after down: %q", out)
	}
	if out := mustRun(t, "migrate", "up", "--db", db, "--to", "1"); !strings.Contains(out, "nothing pending up to version 1") {
		t.Fatalf("second migrate up --to 1: %q", out)
	}
	if _, _, err := run(context.Background(), "migrate", "up", "--db", db, "--to", "0"); err == nil || !strings.Contains(err.Error(), "want 1 or more") {
		t.Fatalf("migrate up --to 0: %v", err)
	}

	// A migration a newer release applied: listed, and not gone below.
	if _, err := conn.Exec(`INSERT INTO txbox_migrations VALUES ('outbox:txbox_outbox', 2, 'fut' || char(27) || 'ure', '2030-01-02T03:04:05Z')`); err != nil {
		t.Fatal(err)
	}
	out = mustRun(t, "migrate", "status", "--db", db)
	if !regexp.MustCompile(`(?m)^outbox:txbox_outbox\s+002\s+fut\\x1bure\s+2030-01-02T03:04:05Z \(by a newer txbox release\)$`).MatchString(out) {
		t.Fatalf("status with a newer release's migration:\n%s", out)
	}
	if out := mustRun(t, "migrate", "status", "--db", db, "--json"); !strings.Contains(out, `"version": 2,`) || !strings.Contains(out, `"newer": true`) {
		t.Fatalf("status --json with a newer release's migration:\n%s", out)
	}
	if _, _, err := run(context.Background(), "migrate", "down", "--db", db, "--to", "1"); err == nil || !strings.Contains(err.Error(), "applied by a newer txbox release") {
		t.Fatalf("down below a newer release's migration: %v", err)
	}
}

// migrate sql --down prints the down migrations above --to, newest first;
// --to alone prints the migrations up to it; --goose prints both in one
// goose file.
func TestMigrateSQLDown(t *testing.T) {
	t.Parallel()
	out := mustRun(t, "migrate", "sql", "--dialect", "postgres", "--down", "--to", "0", "--schema", "shop")
	if !strings.Contains(out, "revert outbox:txbox_outbox version 1") || !strings.Contains(out, `DROP TABLE IF EXISTS "shop"."txbox_outbox"`) {
		t.Fatalf("migrate sql --down --to 0:\n%s", out)
	}
	out = mustRun(t, "migrate", "sql", "--dialect", "postgres", "--to", "1", "--schema", "shop")
	if !strings.Contains(out, `CREATE SCHEMA IF NOT EXISTS "shop";`) || !strings.Contains(out, "version 1 (create_outbox)") || strings.Contains(out, "version 2 ") {
		t.Fatalf("migrate sql --to 1:\n%s", out)
	}
	out = mustRun(t, "migrate", "sql", "--dialect", "sqlite", "--goose")
	up, down, ok := strings.Cut(out, "-- +goose Down\n")
	if !ok || !strings.Contains(up, "\n-- +goose Up\n") || !strings.Contains(up, "CREATE TABLE") || !strings.Contains(down, "DROP TABLE IF EXISTS") ||
		strings.Count(out, "-- +goose StatementBegin") != strings.Count(out, "-- +goose StatementEnd") {
		t.Fatalf("migrate sql --goose:\n%s", out)
	}
	out = mustRun(t, "migrate", "sql", "--dialect", "postgres", "--goose", "--from", "1")
	if strings.Contains(out, "version 1 ") || strings.Contains(out, `CREATE TABLE "txbox_outbox"`) {
		t.Fatalf("migrate sql --goose --from 1 printed a migration at or below 1:\n%s", out)
	}
	if _, _, err := run(context.Background(), "migrate", "sql", "--dialect", "sqlite", "--from", "1", "--down"); err == nil || !strings.Contains(err.Error(), "--from 1") {
		t.Fatalf("--from --down: err = %v", err)
	}
	if _, _, err := run(context.Background(), "migrate", "sql", "--dialect", "sqlite", "--goose", "--down"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("--goose --down: err = %v", err)
	}
}
