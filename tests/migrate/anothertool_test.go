package migrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// toolTarget is a fresh database of one dialect, with what a command-line
// client needs to reach it.
type toolTarget struct {
	d      txboxdriver.Dialect
	db     *sql.DB
	schema string // PostgreSQL
	path   string // SQLite file
	dbName string // MySQL database
}

func toolTargets(t *testing.T, d txboxdriver.Dialect) toolTarget {
	t.Helper()
	switch d {
	case txboxdriver.Postgres:
		db, _ := testenv.PostgresDB(t, 4)
		schema := testenv.Name("txtool")
		t.Cleanup(func() { _, _ = db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
		return toolTarget{d: d, db: db, schema: schema}
	case txboxdriver.SQLite:
		path := filepath.Join(t.TempDir(), "tool.db")
		db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
		testenv.Must(t, err, "open sqlite")
		t.Cleanup(func() { _ = db.Close() })
		return toolTarget{d: d, db: db, path: path}
	default:
		db := testenv.MySQL(t)
		var name string
		testenv.Must(t, db.QueryRow("SELECT DATABASE()").Scan(&name), "database name")
		return toolTarget{d: d, db: db, dbName: name}
	}
}

// client applies script with the dialect's command-line client as a user
// would: psql -f (without -1), sqlite3, mysql.
func (x toolTarget) client(t *testing.T, script string, flags ...string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "txbox.sql")
	testenv.Must(t, os.WriteFile(file, []byte(script), 0o600), "write script")
	var cmd *osexec.Cmd
	switch x.d {
	case txboxdriver.Postgres:
		cmd = osexec.Command("psql", append(flags, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", file, testenv.PostgresURL())...)
	case txboxdriver.SQLite:
		cmd = osexec.Command("sqlite3", "-bail", x.path, ".read "+file)
	case txboxdriver.MySQL:
		cmd = osexec.Command("mysql", "-h", "127.0.0.1", "-u", "root", x.dbName, "-e", "source "+file)
	}
	tool := cmd.Args[0]
	if _, err := osexec.LookPath(tool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed and CI=true", tool)
		}
		t.Skipf("%s is not installed", tool)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "ERROR") {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// goose applies the goose file with goose itself (as a library).
func (x toolTarget) goose(t *testing.T, ctx context.Context, script string) {
	t.Helper()
	dialect := map[txboxdriver.Dialect]goose.Dialect{txboxdriver.Postgres: goose.DialectPostgres, txboxdriver.SQLite: goose.DialectSQLite3, txboxdriver.MySQL: goose.DialectMySQL}[x.d]
	p, err := goose.NewProvider(dialect, x.db, fstest.MapFS{"20260101000000_txbox.sql": {Data: []byte(script)}})
	testenv.Must(t, err, "goose provider")
	_, err = p.Up(ctx)
	testenv.Must(t, err, "goose up")
}

// Every form of `txbox migrate sql` applied with the tool it is for (goose
// as a library; psql -f without -1, which atlas and Flyway resemble;
// sqlite3; mysql) leaves tables that Status shows applied, Verify finds
// sound, Up leaves alone, and a relay starts on and delivers from.
func TestScriptsAppliedByAnotherTool(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		for _, form := range []string{"client", "client --no-begin", "goose"} {
			if form == "client --no-begin" && d != txboxdriver.Postgres {
				continue
			}
			t.Run(string(d)+"/"+form, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				x := toolTargets(t, d)
				cfg := txboxmigrate.Config{Schema: x.schema, InboxTables: []string{"inbox"}}
				plan, err := txboxmigrate.Plan(d, cfg)
				testenv.Must(t, err, "plan")
				switch form {
				case "goose":
					script, err := txboxmigrate.GooseScript(d, x.schema, plan)
					testenv.Must(t, err, "goose script")
					x.goose(t, ctx, script)
				case "client":
					script, err := txboxmigrate.UpScript(d, x.schema, plan, txboxmigrate.ScriptOptions{})
					testenv.Must(t, err, "script")
					x.client(t, script)
				default: // psql -1 -f: the transaction is the tool's, as Flyway's and atlas's are
					script, err := txboxmigrate.UpScript(d, x.schema, plan, txboxmigrate.ScriptOptions{NoBegin: true})
					testenv.Must(t, err, "script")
					x.client(t, script, "-1")
				}
				drv := txboxsql.New(x.db, d)
				m, err := txboxmigrate.New(drv, cfg)
				testenv.Must(t, err, "txboxmigrate.New")
				st, err := m.Status(ctx)
				testenv.Must(t, err, "status")
				for _, s := range st {
					if s.AppliedAt.IsZero() {
						t.Errorf("status: %s %d (%s) pending after the script", s.Target, s.Version, s.Name)
					}
				}
				problems, err := m.Verify(ctx)
				testenv.Must(t, err, "verify")
				if len(problems) > 0 {
					t.Fatalf("verify: %v", problems)
				}
				applied, err := m.Up(ctx)
				if err != nil || len(applied) > 0 {
					t.Fatalf("up after the script: applied %d, %v; want nothing to do", len(applied), err)
				}
				deliver(t, drv, x.schema)
			})
		}
	}
}

// deliver starts a relay on the outbox table, adds a message and waits
// for its publication.
func deliver[TTx any](t *testing.T, drv txboxdriver.Driver[TTx], schema string) {
	t.Helper()
	ctx := context.Background()
	pub := &drivertest.Recorder{}
	r, err := relay.New(drv, pub, relay.Config{Schema: schema, PollInterval: 20 * time.Millisecond, DisableNotify: true})
	testenv.Must(t, err, "relay")
	testenv.Must(t, r.Start(ctx), "relay start")
	defer func() { testenv.Must(t, r.Stop(ctx), "relay stop") }()
	ob, err := txbox.New(drv, txbox.Config{Schema: schema})
	testenv.Must(t, err, "outbox")
	testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "t", Payload: []byte("x")})), "add")
	testenv.Await(t, "the relay delivering the row", func() (bool, string) {
		return len(pub.Published()) > 0, relayProgress(r)
	})
}

// relayProgress is what r has done: its published, failed-round and
// rejection counts (not its round count, which grows while it idles).
func relayProgress(r *relay.Relay) string {
	st := testenv.RelayStats(r)
	return fmt.Sprintf("published %d, failed rounds %d, rejected %d, dead %d", st.Published, st.FailedRounds, st.Rejected, st.Dead)
}

// A table altered by hand after its migrations were recorded: Verify and
// the relay's start-up check name what is wrong instead of reporting it
// migrated; a dropped table is reverted to the end by down --to 0 --force
// and recreated by Up.
func TestTablesAlteredByHand(t *testing.T) {
	t.Parallel()
	type breakage struct {
		name string
		sql  map[txboxdriver.Dialect][]string
		want string
	}
	cases := []breakage{
		{"column dropped", map[txboxdriver.Dialect][]string{
			txboxdriver.Postgres: {"ALTER TABLE txbox_outbox DROP COLUMN last_error"},
			txboxdriver.SQLite:   {"ALTER TABLE txbox_outbox DROP COLUMN last_error"},
			txboxdriver.MySQL:    {"ALTER TABLE txbox_outbox DROP COLUMN last_error"},
		}, "column last_error is missing"},
		{"column retyped", map[txboxdriver.Dialect][]string{
			txboxdriver.Postgres: {"ALTER TABLE txbox_outbox ALTER COLUMN published_at TYPE text"},
			txboxdriver.MySQL:    {"ALTER TABLE txbox_outbox MODIFY published_at VARCHAR(64) NULL"},
		}, "column published_at is"},
		{"trigger refusing UPDATE", map[txboxdriver.Dialect][]string{
			txboxdriver.Postgres: {"CREATE FUNCTION no_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'updates are audited'; END $$",
				"CREATE TRIGGER no_update BEFORE UPDATE ON txbox_outbox FOR EACH ROW EXECUTE FUNCTION no_update()"},
			txboxdriver.SQLite: {"CREATE TRIGGER no_update BEFORE UPDATE ON txbox_outbox BEGIN SELECT RAISE(ABORT, 'updates are audited'); END"},
			txboxdriver.MySQL:  {"CREATE TRIGGER no_update BEFORE UPDATE ON txbox_outbox FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'updates are audited'"},
		}, "updates are audited"},
		{"table dropped", map[txboxdriver.Dialect][]string{
			txboxdriver.Postgres: {"DROP TABLE txbox_outbox"},
			txboxdriver.SQLite:   {"DROP TABLE txbox_outbox"},
			txboxdriver.MySQL:    {"DROP TABLE txbox_outbox"},
		}, "is missing although its migrations are recorded"},
	}
	for _, x := range databases(t) {
		for _, c := range cases {
			if c.sql[x.d] == nil {
				continue
			}
			t.Run(string(x.d)+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				db := x.db
				if x.d == txboxdriver.Postgres { // a schema of its own per case
					db, _ = testenv.PostgresDB(t, 4)
				} else if x.d == txboxdriver.SQLite {
					db = testenv.SQLite(t)
				} else {
					db = testenv.MySQL(t)
				}
				x := dialectDB{x.d, db}
				m := up(t, x)
				for _, q := range c.sql[x.d] {
					_, err := db.ExecContext(ctx, q)
					testenv.Must(t, err, "%s", q)
				}
				problems, err := m.Verify(ctx)
				testenv.Must(t, err, "verify")
				if len(problems) != 1 || !strings.Contains(problems[0], c.want) || !strings.Contains(problems[0], "txbox migrate") {
					t.Fatalf("verify: %q, want one naming %q and what to run", problems, c.want)
				}
				t.Logf("verify: %s", problems[0])
				r, err := relay.New(txboxsql.New(db, x.d), &drivertest.Recorder{}, relay.Config{DisableNotify: true})
				testenv.Must(t, err, "relay")
				if err := r.Validate(ctx); err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("relay start-up check: %v, want %q", err, c.want)
				}
				if c.name != "table dropped" {
					return
				}
				rev, err := m.Down(ctx, txboxmigrate.DownOptions{To: 0, Force: true})
				testenv.Must(t, err, "down --to 0 --force after the table was dropped (reverted %d)", len(rev))
				_, err = m.Up(ctx)
				testenv.Must(t, err, "up")
				problems, err = m.Verify(ctx)
				if err != nil || len(problems) > 0 {
					t.Fatalf("after down and up: %v, %v", problems, err)
				}
			})
		}
	}
}

// Right after Up, on every dialect, Verify finds nothing:
// the columns it expects are those the migrations create.
func TestVerifyAfterUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, x := range databases(t) {
		m, err := txboxmigrate.New(txboxsql.New(x.db, x.d), txboxmigrate.Config{InboxTables: []string{"inbox"}})
		testenv.Must(t, err, "txboxmigrate.New")
		_, err = m.Up(ctx)
		testenv.Must(t, err, "up")
		problems, err := m.Verify(ctx)
		if err != nil || len(problems) > 0 {
			t.Errorf("%s: verify after up: %v, %v", x.d, problems, err)
		}
		var n int
		testenv.Must(t, x.db.QueryRowContext(ctx, "SELECT count(*) FROM txbox_outbox").Scan(&n), "count")
		if n != 0 {
			t.Errorf("%s: the probe left %d row(s)", x.d, n)
		}
	}
}

// A relay may run as a role that reads, marks and deletes outbox rows but
// never inserts one: the start-up probe, whose INSERT such a role is
// refused, does not count the refusal as a table the relay cannot use.
func TestVerifyUnderARoleWithoutInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, schema := testenv.PostgresDB(t, 1)
	m, err := txboxmigrate.New(txboxsql.New(db, txboxdriver.Postgres), txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "up")
	role := testenv.Name("txbox_relay_role")
	for _, q := range []string{
		"CREATE ROLE " + role,
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
	} {
		_, err := db.ExecContext(ctx, q)
		testenv.Must(t, err, "%s", q)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = db.ExecContext(ctx, "RESET ROLE")
		_, _ = db.ExecContext(ctx, "DROP OWNED BY "+role)
		_, _ = db.ExecContext(ctx, "DROP ROLE "+role)
	})
	// The pool has one connection: the role holds for every statement.
	_, err = db.ExecContext(ctx, "SET ROLE "+role)
	testenv.Must(t, err, "set role")
	var denied error
	_, denied = db.ExecContext(ctx, "INSERT INTO txbox_outbox (topic, payload) VALUES ('t', '\\x'::bytea)")
	if denied == nil || !strings.Contains(denied.Error(), "42501") {
		t.Fatalf("insert as %s: %v, want permission denied (42501)", role, denied)
	}
	problems, err := m.Verify(ctx)
	if err != nil || len(problems) > 0 {
		t.Fatalf("verify as a role without INSERT: %q, %v; want no problem", problems, err)
	}
}
