package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// hostileTopic holds an escape sequence and a bidi override: a dead row's
// columns are not checked by the table's contract, so plain SQL can store it.
const hostileTopic = "evil\x1b[31m\u202etopic"

// inspectDB is a prepared outbox table: a dead row of key K (with a hostile
// topic and payload) parking a second row of K, a retrying row, and two
// pending rows.
type inspectDB struct {
	args  []string // --db and --schema
	in    *inspect.Inspector
	count func(where string) int64
}

func TestInspectCommands(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "inspect.db")
		db := "sqlite://" + path
		mustRun(t, "migrate", "up", "--db", db)
		conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
		testenv.Must(t, err, "open")
		t.Cleanup(func() { _ = conn.Close() })
		_, err = conn.Exec(`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, headers, attempts, last_error, next_attempt_at, dead_at) VALUES
			('m1', ?1, 'K', ?2, '{"h":"v\u001b"}', 10, ?3, 9999999999999999, 1),
			('m2', 't', 'K', x'00', '{}', 0, NULL, NULL, NULL),
			('m3', 'f', NULL, x'00', '{}', 2, 'nope', 9999999999999999, NULL),
			('m4', 'u', NULL, x'00', '{}', 0, NULL, NULL, NULL),
			('m5', 'u', 'J', x'00', '{}', 0, NULL, NULL, NULL)`,
			hostileTopic, []byte("pay\x1b]0;pwned\x07load\u202e"), "bad \x1b[2J error")
		testenv.Must(t, err, "insert")
		in, err := inspect.New(txboxsql.New(conn, txboxdriver.SQLite), txbox.Config{})
		testenv.Must(t, err, "inspect.New")
		checkInspect(t, inspectDB{args: []string{"--db", db}, in: in, count: func(where string) int64 {
			var n int64
			testenv.Must(t, conn.QueryRow("SELECT count(*) FROM txbox_outbox WHERE "+where).Scan(&n), "count %s", where)
			return n
		}})
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		conn := testenv.MySQL(t)
		var name string
		testenv.Must(t, conn.QueryRow("SELECT DATABASE()").Scan(&name), "database name")
		args := []string{"--db", "mysql://root@127.0.0.1:3306/" + name}
		mustRun(t, append([]string{"migrate", "up"}, args...)...)
		_, err := conn.Exec(`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, headers, attempts, last_error, next_attempt_at, dead_at) VALUES
			('m1', ?, 'K', ?, '{"h":"v\\u001b"}', 10, ?, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, UTC_TIMESTAMP(6)),
			('m2', 't', 'K', x'00', '{}', 0, NULL, NULL, NULL),
			('m3', 'f', NULL, x'00', '{}', 2, 'nope', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, NULL),
			('m4', 'u', NULL, x'00', '{}', 0, NULL, NULL, NULL),
			('m5', 'u', 'J', x'00', '{}', 0, NULL, NULL, NULL)`,
			hostileTopic, []byte("pay\x1b]0;pwned\x07load\u202e"), "bad \x1b[2J error")
		testenv.Must(t, err, "insert")
		in, err := inspect.New(txboxsql.New(conn, txboxdriver.MySQL), txbox.Config{})
		testenv.Must(t, err, "inspect.New")
		checkInspect(t, inspectDB{args: args, in: in, count: func(where string) int64 {
			var n int64
			testenv.Must(t, conn.QueryRow("SELECT count(*) FROM txbox_outbox WHERE "+where).Scan(&n), "count %s", where)
			return n
		}})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		admin, schema := pgSchema(t)
		args := []string{"--db", testenv.PostgresURL(), "--schema", schema}
		mustRun(t, append([]string{"migrate", "up"}, args...)...)
		ctx := context.Background()
		table := schema + ".txbox_outbox"
		_, err := admin.Exec(ctx, `INSERT INTO `+table+` (message_id, topic, ordering_key, payload, headers, attempts, last_error, next_attempt_at, dead_at) VALUES
			('m1', $1, 'K', $2, '{"h":"v\u001b"}', 10, $3, now() + interval '1 hour', now()),
			('m2', 't', 'K', '\x00', '{}', 0, NULL, NULL, NULL),
			('m3', 'f', NULL, '\x00', '{}', 2, 'nope', now() + interval '1 hour', NULL),
			('m4', 'u', NULL, '\x00', '{}', 0, NULL, NULL, NULL),
			('m5', 'u', 'J', '\x00', '{}', 0, NULL, NULL, NULL)`,
			hostileTopic, []byte("pay\x1b]0;pwned\x07load\u202e"), "bad \x1b[2J error")
		testenv.Must(t, err, "insert")
		in, err := inspect.New(txboxpgx.New(admin), txbox.Config{Schema: schema})
		testenv.Must(t, err, "inspect.New")
		checkInspect(t, inspectDB{args: args, in: in, count: func(where string) int64 {
			var n int64
			testenv.Must(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+where).Scan(&n), "count %s", where)
			return n
		}})
	})
}

// noRawControls fails when out holds an escape character or a bidi override.
func noRawControls(t *testing.T, what, out string) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Errorf("%s prints a raw control or bidi character:\n%q", what, out)
	}
}

func checkInspect(t *testing.T, d inspectDB) {
	cmd := func(args ...string) string { t.Helper(); return mustRun(t, append(args, d.args...)...) }
	b, err := d.in.Backlog(context.Background())
	testenv.Must(t, err, "backlog")
	// The Go API against direct SQL counts and the prepared rows.
	if got := d.count("published_at IS NULL"); b.Undelivered() != got || got != 5 {
		t.Fatalf("Backlog.Undelivered %d, SQL count %d, want 5", b.Undelivered(), got)
	}
	if got := d.count("dead_at IS NOT NULL"); b.Dead != got || got != 1 {
		t.Fatalf("Backlog.Dead %d, SQL count %d, want 1", b.Dead, got)
	}
	if b.Pending != 2 || b.Retrying != 1 || b.Parked != 1 || b.ParkedKeys != 1 {
		t.Fatalf("backlog %+v: want 2 pending, 1 retrying, 1 parked, 1 parked key", b)
	}

	// stats --json prints the Go API's figures.
	out := cmd("stats", "--json")
	noRawControls(t, "stats --json", out)
	var j struct {
		Pending, Retrying, Parked, Dead, Undelivered int64
		ParkedKeys                                   int64 `json:"parked_keys"`
		Topics                                       []struct {
			Topic             string
			Undelivered, Dead int64
		}
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("stats --json is not JSON: %v\n%s", err, out)
	}
	if j.Pending != b.Pending || j.Retrying != b.Retrying || j.Parked != b.Parked || j.Dead != b.Dead ||
		j.ParkedKeys != b.ParkedKeys || j.Undelivered != b.Undelivered() || len(j.Topics) != len(b.Topics) {
		t.Fatalf("stats --json %+v, Go API %+v", j, b)
	}
	for i, tc := range b.Topics {
		if j.Topics[i].Topic != tc.Topic || j.Topics[i].Undelivered != tc.Undelivered || j.Topics[i].Dead != tc.Dead {
			t.Fatalf("stats --json topic %d %+v, Go API %+v", i, j.Topics[i], tc)
		}
	}

	// The text form prints the same numbers, and the hostile topic escaped.
	out = cmd("stats")
	noRawControls(t, "stats", out)
	for name, want := range map[string]int64{"pending": b.Pending, "retrying": b.Retrying, "parked": b.Parked, "dead": b.Dead, "undelivered": b.Undelivered()} {
		m := regexp.MustCompile(`(?m)^` + name + `\s+(\d+)`).FindStringSubmatch(out)
		if m == nil || m[1] != strconv.FormatInt(want, 10) {
			t.Errorf("stats: %s line %v, want %d:\n%s", name, m, want, out)
		}
	}
	if !strings.Contains(out, `evil\x1b[31m\u202etopic`) {
		t.Errorf("stats does not print the hostile topic escaped:\n%s", out)
	}

	// --watch with a bounded number of refreshes, not a terminal: one block
	// each.
	out = cmd("stats", "--watch", "--count", "3", "--interval", "100ms")
	if n := len(regexp.MustCompile(`(?m)^undelivered\s+5\s+\(outstanding \+ dead\)$`).FindAllString(out, -1)); n != 3 {
		t.Errorf("stats --watch --count 3 printed %d blocks:\n%s", n, out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("stats --watch to a pipe clears the screen:\n%q", out)
	}

	// pending list, as JSON and as a table, equals the Go API.
	rows, err := d.in.Pending(context.Background(), inspect.Filter{})
	testenv.Must(t, err, "pending")
	out = cmd("pending", "list", "--json")
	var pj []struct {
		Seq       int64
		ID        string `json:"message_id"`
		State     string
		Attempts  int
		LastError string `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(out), &pj); err != nil || len(pj) != len(rows) || len(rows) != 4 {
		t.Fatalf("pending list --json (%v), %d rows, Go API %d, want 4:\n%s", err, len(pj), len(rows), out)
	}
	for i, r := range rows {
		if pj[i].Seq != r.Seq || pj[i].ID != r.ID || pj[i].State != string(r.State) || pj[i].Attempts != r.Attempts {
			t.Errorf("pending list --json row %d %+v, Go API %+v", i, pj[i], r)
		}
	}
	if pj[1].ID != "m3" || pj[1].State != "retrying" || pj[1].LastError != "nope" || pj[0].State != "parked" {
		t.Errorf("pending list --json: %+v", pj)
	}
	// A dead row is never tried again unless redriven: no next attempt is
	// shown for it, whatever its next_attempt_at holds.
	out = cmd("pending", "list", "--dead", "--json")
	var deadRows []struct {
		ID   string  `json:"message_id"`
		Next *string `json:"next_attempt_at"`
	}
	testenv.Must(t, json.Unmarshal([]byte(out), &deadRows), "pending list --dead --json")
	for _, r := range deadRows {
		if r.ID == "m1" && r.Next != nil {
			t.Errorf("the dead row m1 shows a next attempt at %s", *r.Next)
		}
	}
	out = cmd("pending", "list", "--min-attempts", "1", "--dead")
	noRawControls(t, "pending list", out)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(lines[1], `bad \x1b[2J error`) ||
		!strings.Contains(lines[2], "retrying") {
		t.Errorf("pending list --min-attempts 1 --dead:\n%s", out)
	}
	if out := cmd("pending", "list", "--topic", "u", "--key", "J"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "pending") {
		t.Errorf("pending list --topic u --key J:\n%s", out)
	}

	// dead show: escaped text, valid JSON, raw bytes.
	all, err := d.in.Pending(context.Background(), inspect.Filter{Dead: true})
	testenv.Must(t, err, "pending")
	seq := strconv.FormatInt(all[0].Seq, 10)
	out = cmd("dead", "show", seq)
	noRawControls(t, "dead show", out)
	for _, s := range []string{`pay\x1b]0;pwned\aload\u202e`, `h: v\x1b`, `bad \x1b[2J error`, `evil\x1b[31m\u202etopic`} {
		if !strings.Contains(out, s) {
			t.Errorf("dead show lacks %q:\n%s", s, out)
		}
	}
	if !regexp.MustCompile(`(?m)^state\s+dead$`).MatchString(out) {
		t.Errorf("dead show lacks the state dead:\n%s", out)
	}
	out = cmd("dead", "show", seq, "--json")
	noRawControls(t, "dead show --json", out)
	var mj struct {
		Topic   string
		Payload []byte
		Headers map[string]string
	}
	if err := json.Unmarshal([]byte(out), &mj); err != nil || mj.Topic != hostileTopic || string(mj.Payload) != "pay\x1b]0;pwned\x07load\u202e" || mj.Headers["h"] != "v\x1b" {
		t.Errorf("dead show --json (%v) %+v:\n%s", err, mj, out)
	}
	if out := cmd("dead", "show", seq, "--raw"); out != "pay\x1b]0;pwned\x07load\u202e" {
		t.Errorf("dead show --raw = %q", out)
	}
	out = cmd("dead", "list", "--json")
	noRawControls(t, "dead list --json", out)
	var dj []struct{ Seq, Parks int64 }
	if err := json.Unmarshal([]byte(out), &dj); err != nil || len(dj) != 1 || dj[0].Parks != 1 {
		t.Errorf("dead list --json (%v):\n%s", err, out)
	}
	out = cmd("migrate", "status", "--json")
	var sj []struct {
		Target    string
		AppliedAt *string `json:"applied_at"`
	}
	if err := json.Unmarshal([]byte(out), &sj); err != nil || len(sj) == 0 || sj[0].AppliedAt == nil {
		t.Errorf("migrate status --json (%v):\n%s", err, out)
	}

	// Bad input: clear errors.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dead", "show", "999999"}, "no undelivered message has SEQ 999999"},
		{[]string{"dead", "show", "x"}, "not a SEQ"},
		{[]string{"pending", "list", "--limit", "-1"}, "--limit -1: must be a positive integer"},
		{[]string{"pending", "list", "--min-attempts", "-2"}, "--min-attempts -2"},
		{[]string{"stats", "--watch", "--interval", "soon"}, "invalid argument"},
		{[]string{"stats", "--watch", "--interval", "1ms"}, "--interval 1ms: must be at least 100ms"},
		{[]string{"stats", "--count", "2"}, "--count needs --watch"},
	} {
		_, _, err := run(context.Background(), append(c.args, d.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("txbox %s: %v, want an error with %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

// cancelOn cancels a context once what is written holds s.
type cancelOn struct {
	testenv.Buffer
	s      string
	cancel context.CancelFunc
}

func (w *cancelOn) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Contains(w.Buffer.String(), w.s) {
		w.cancel()
	}
	return n, err
}

// stats --watch ends cleanly (no error) when its context ends, as on
// SIGINT: here after the first block, with an hour to the next.
func TestStatsWatchStopsOnCancel(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "watch.db")
	mustRun(t, "migrate", "up", "--db", db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOn{s: "oldest claimable age", cancel: cancel}
	var errOut testenv.Buffer
	if err := cli.Run(ctx, []string{"stats", "--watch", "--interval", "1h", "--db", db}, out, &errOut); err != nil {
		t.Fatalf("stats --watch cancelled: %v", err)
	}
	if n := strings.Count(out.String(), "undelivered"); n != 1 {
		t.Fatalf("stats --watch printed %d blocks before its cancel:\n%s", n, out.String())
	}
}
