package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// namespace is one place to migrate: a PostgreSQL schema, a MySQL database,
// a SQLite file. name is what the catalog prints of it (replaced before
// comparing two namespaces' catalogs).
type namespace struct {
	d      txboxdriver.Dialect
	db     *sql.DB
	schema string
	name   string
}

var dialects = []txboxdriver.Dialect{txboxdriver.Postgres, txboxdriver.MySQL, txboxdriver.SQLite}

// namespaces returns two fresh namespaces of dialect d.
func namespaces(t *testing.T, d txboxdriver.Dialect) [2]namespace {
	var out [2]namespace
	for i := range out {
		switch d {
		case txboxdriver.Postgres:
			db, _ := testenv.PostgresDB(t, 4)
			schema := testenv.Name("txdown")
			t.Cleanup(func() {
				if _, err := db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE"); err != nil {
					t.Logf("drop schema %s: %v", schema, err)
				}
			})
			out[i] = namespace{d: d, db: db, schema: schema, name: schema}
		case txboxdriver.MySQL:
			db := testenv.MySQL(t)
			var name string
			testenv.Must(t, db.QueryRow("SELECT DATABASE()").Scan(&name), "database name")
			out[i] = namespace{d: d, db: db, name: name}
		case txboxdriver.SQLite:
			out[i] = namespace{d: d, db: testenv.SQLite(t)}
		}
	}
	return out
}

func (n namespace) migrator(t *testing.T) *txboxmigrate.Migrator {
	t.Helper()
	m, err := txboxmigrate.New(txboxsql.New(n.db, n.d), txboxmigrate.Config{Schema: n.schema, InboxTables: []string{"inbox"}})
	testenv.Must(t, err, "txboxmigrate.New")
	return m
}

// catalogQueries read what the migrations create, one line per object
// or column, in a stable order.
var catalogQueries = map[txboxdriver.Dialect][]string{
	txboxdriver.Postgres: {
		`SELECT c.relname || ' ' || c.relkind::text || ' ' || c.relpersistence::text FROM pg_class c
		 WHERE c.relnamespace = $1::regnamespace ORDER BY 1`,
		`SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull
		        || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-') || ' ' || a.attidentity::text || a.attgenerated::text
		 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1`,
		`SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		 WHERE c.relnamespace = $1::regnamespace ORDER BY 1`,
		`SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) || ' ' || convalidated
		 FROM pg_constraint WHERE connamespace = $1::regnamespace ORDER BY 1`,
		`SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		 WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal ORDER BY 1`,
		`SELECT proname || '(' || pg_get_function_identity_arguments(oid) || ') ' || md5(replace(prosrc, $1, 'NS'))
		 FROM pg_proc WHERE pronamespace = $1::regnamespace ORDER BY 1`,
	},
	txboxdriver.MySQL: {
		`SELECT CONCAT_WS(' ', table_name, table_type, engine) FROM information_schema.tables
		 WHERE table_schema = DATABASE() ORDER BY 1`,
		`SELECT CONCAT_WS(' ', table_name, column_name, column_type, is_nullable, IFNULL(column_default, '-'),
		        extra, IFNULL(generation_expression, '-'), IFNULL(collation_name, '-'))
		 FROM information_schema.columns WHERE table_schema = DATABASE() ORDER BY 1`,
		`SELECT CONCAT_WS(' ', table_name, index_name, seq_in_index, column_name, non_unique)
		 FROM information_schema.statistics WHERE table_schema = DATABASE() ORDER BY 1`,
		`SELECT CONCAT_WS(' ', constraint_name, check_clause) FROM information_schema.check_constraints
		 WHERE constraint_schema = DATABASE() ORDER BY 1`,
		`SELECT CONCAT_WS(' ', trigger_name, event_object_table, action_timing, event_manipulation, MD5(REPLACE(action_statement, DATABASE(), 'NS')))
		 FROM information_schema.triggers WHERE trigger_schema = DATABASE() ORDER BY 1`,
	},
	txboxdriver.SQLite: {
		`SELECT type || ' ' || name || ' ' || tbl_name || ' ' || coalesce(sql, '-') FROM sqlite_master
		 WHERE name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY 1`,
	},
}

// catalog returns the namespace's objects, its own name replaced by "NS".
func (n namespace) catalog(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, q := range catalogQueries[n.d] {
		var args []any
		if n.d == txboxdriver.Postgres {
			args = []any{n.schema}
		}
		rows, err := n.db.Query(q, args...)
		testenv.Must(t, err, "catalog %s", q)
		for rows.Next() {
			var s string
			testenv.Must(t, rows.Scan(&s), "scan catalog")
			if n.name != "" {
				s = strings.ReplaceAll(s, n.name, "NS")
			}
			out = append(out, s)
		}
		testenv.Must(t, rows.Err(), "catalog rows")
		rows.Close()
	}
	return out
}

// applied lists the applied migrations' targets and versions.
func applied(t *testing.T, m *txboxmigrate.Migrator) []string {
	t.Helper()
	st, err := m.Status(context.Background())
	testenv.Must(t, err, "status")
	var out []string
	for _, s := range st {
		if !s.AppliedAt.IsZero() {
			out = append(out, fmt.Sprintf("%s#%d", s.Target, s.Version))
		}
	}
	return out
}

// Down to version K leaves exactly what Up to version K creates, for every
// K of every dialect: the same tables, columns, defaults, indexes,
// constraints, triggers and functions (bodies compared by hash), and the
// same migrations recorded. One namespace goes up step by step; the other
// goes all the way up, then down to each K in turn, so each down is also
// followed by a full Up again.
func TestDownRestoresEachVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ns := namespaces(t, d)
			stepped, roundTrip := ns[0].migrator(t), ns[1].migrator(t)
			plan, err := txboxmigrate.Plan(d, txboxmigrate.Config{InboxTables: []string{"inbox"}})
			testenv.Must(t, err, "plan")
			top := slices.MaxFunc(plan, func(a, b txboxmigrate.Migration) int { return a.Version - b.Version }).Version
			for k := 0; k < top; k++ {
				_, err := stepped.UpTo(ctx, k)
				testenv.Must(t, err, "up to %d", k)
				_, err = roundTrip.Up(ctx)
				testenv.Must(t, err, "up (before down to %d)", k)
				reverted, err := roundTrip.Down(ctx, txboxmigrate.DownOptions{To: k})
				testenv.Must(t, err, "down to %d", k)
				for _, r := range reverted {
					if r.Version <= k {
						t.Fatalf("down to %d reverted version %d", k, r.Version)
					}
				}
				if got, want := applied(t, roundTrip), applied(t, stepped); !slices.Equal(got, want) {
					t.Fatalf("down to %d: applied %v, want %v", k, got, want)
				}
				if got, want := ns[1].catalog(t), ns[0].catalog(t); !slices.Equal(got, want) {
					t.Fatalf("down to %d: the catalog differs from up to %d:\n%s", k, k, diff(want, got))
				}
			}
			_, err = roundTrip.Down(ctx, txboxmigrate.DownOptions{To: 0})
			testenv.Must(t, err, "down to 0")
			again, err := roundTrip.Down(ctx, txboxmigrate.DownOptions{To: 0})
			testenv.Must(t, err, "down to 0 twice")
			if len(again) != 0 {
				t.Fatalf("a second down to 0 reverted %d migrations", len(again))
			}
		})
	}
}

// diff lists the lines only in want ("-") and only in got ("+").
func diff(want, got []string) string {
	var b strings.Builder
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&b, "- %s\n", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&b, "+ %s\n", g)
		}
	}
	return b.String()
}

// Down refuses to drop an outbox table holding undelivered messages, or an
// inbox table holding receipts, before it reverts anything; delivered rows
// are no obstacle, and Force drops the tables anyway.
func TestDownRefusesToLoseData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, x := range databases(t) {
		t.Run(string(x.d), func(t *testing.T) {
			m, err := txboxmigrate.New(txboxsql.New(x.db, x.d), txboxmigrate.Config{InboxTables: []string{"inbox"}})
			testenv.Must(t, err, "txboxmigrate.New")
			_, err = m.Up(ctx)
			testenv.Must(t, err, "up")
			before := applied(t, m)
			if _, err := m.Down(ctx, txboxmigrate.DownOptions{To: -1}); !errors.Is(err, txbox.ErrInvalidConfig) {
				t.Fatalf("down to -1: %v, want txbox.ErrInvalidConfig", err)
			}
			insert(t, x, "topic, payload", "t", []byte("pending"))
			testenv.Must(t, exec(ctx, x.db, x.d, "INSERT INTO inbox (source, message_id) VALUES (?, ?)", "s", "m1"), "receipt")

			for _, c := range []struct {
				cfg  txboxmigrate.Config
				want string
			}{
				{txboxmigrate.Config{}, `outbox table "txbox_outbox" holds 1 undelivered message(s)`},
				{txboxmigrate.Config{NoOutbox: true, InboxTables: []string{"inbox"}}, `inbox table "inbox" holds 1 receipt(s)`},
				// Both named, in one line.
				{txboxmigrate.Config{InboxTables: []string{"inbox"}}, `inbox table "inbox" holds 1 receipt(s) (without them a redelivered message is handled again), which dropping it deletes; outbox table "txbox_outbox" holds 1 undelivered message(s)`},
			} {
				only, err := txboxmigrate.New(txboxsql.New(x.db, x.d), c.cfg)
				testenv.Must(t, err, "txboxmigrate.New")
				reverted, err := only.Down(ctx, txboxmigrate.DownOptions{})
				if !errors.Is(err, txboxmigrate.ErrDataLoss) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("down to 0: %v, want ErrDataLoss saying %q", err, c.want)
				}
				if len(reverted) != 0 {
					t.Fatalf("down reverted %d migrations before refusing", len(reverted))
				}
			}
			if got := applied(t, m); !slices.Equal(got, before) {
				t.Fatalf("after the refusals applied %v, want %v", got, before)
			}

			// Delivered rows do not hold the outbox back.
			testenv.Must(t, exec(ctx, x.db, x.d, "UPDATE txbox_outbox SET published_at = created_at"), "deliver")
			outbox, err := txboxmigrate.New(txboxsql.New(x.db, x.d), txboxmigrate.Config{})
			testenv.Must(t, err, "txboxmigrate.New")
			_, err = outbox.Down(ctx, txboxmigrate.DownOptions{})
			testenv.Must(t, err, "down of the outbox, delivered")
			_, err = m.Down(ctx, txboxmigrate.DownOptions{})
			if !errors.Is(err, txboxmigrate.ErrDataLoss) {
				t.Fatalf("down of the inbox with a receipt: %v, want ErrDataLoss", err)
			}
			_, err = m.Down(ctx, txboxmigrate.DownOptions{Force: true})
			testenv.Must(t, err, "forced down")
			if got := applied(t, m); len(got) != 0 {
				t.Fatalf("after a forced down to 0, applied %v", got)
			}
			var n int
			if err := x.db.QueryRow("SELECT count(*) FROM inbox").Scan(&n); err == nil {
				t.Fatal("the inbox table is still there after a forced down to 0")
			}
		})
	}
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// A down migration file exists for every migration of every dialect and
// kind (Plan refuses otherwise), and none is empty.
func TestEveryMigrationHasADown(t *testing.T) {
	for _, d := range dialects {
		plan, err := txboxmigrate.Plan(d, txboxmigrate.Config{InboxTables: []string{"inbox"}})
		testenv.Must(t, err, "plan %s", d)
		for _, mg := range plan {
			if strings.TrimSpace(stripComments(mg.Down)) == "" {
				t.Errorf("%s %s %d (%s): empty down migration", d, mg.Target, mg.Version, mg.Name)
			}
		}
	}
	files, err := filepath.Glob("../../txboxmigrate/sql/*/*/*.sql")
	testenv.Must(t, err, "glob")
	for _, f := range files {
		if strings.HasSuffix(f, ".down.sql") {
			if _, err := os.Stat(strings.TrimSuffix(f, ".down.sql") + ".sql"); err != nil {
				t.Errorf("%s reverts no migration", f)
			}
		}
	}
}

// gooseStatements reads a goose migration file as goose does with
// StatementBegin/End: the statements of its Up and Down sections.
func gooseStatements(t *testing.T, file string) (up, down []string) {
	t.Helper()
	var cur *[]string
	var stmt strings.Builder
	in := false
	for _, line := range strings.Split(file, "\n") {
		switch strings.TrimSpace(line) {
		case "-- +goose Up":
			cur = &up
		case "-- +goose Down":
			cur = &down
		case "-- +goose StatementBegin":
			in = true
			stmt.Reset()
		case "-- +goose StatementEnd":
			in = false
			if cur == nil {
				t.Fatal("a statement before -- +goose Up")
			}
			*cur = append(*cur, strings.TrimSuffix(strings.TrimSpace(stmt.String()), ";"))
		default:
			if in {
				stmt.WriteString(line + "\n")
			} else if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "--") {
				t.Fatalf("SQL outside StatementBegin/End: %q", line)
			}
		}
	}
	return up, down
}

// The goose file (`txbox migrate sql --goose`), applied statement by
// statement as goose would, creates what Migrator.Up creates, and its Down
// section leaves nothing behind.
func TestGooseScriptAppliesAndReverts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ns := namespaces(t, d)
			cfg := txboxmigrate.Config{Schema: ns[1].schema, InboxTables: []string{"inbox"}}
			plan, err := txboxmigrate.Plan(d, cfg)
			testenv.Must(t, err, "plan")
			script, err := txboxmigrate.GooseScript(d, cfg.Schema, plan)
			testenv.Must(t, err, "goose script")
			up, down := gooseStatements(t, script)
			if len(up) == 0 || len(down) == 0 {
				t.Fatalf("goose file with %d up and %d down statements", len(up), len(down))
			}
			_, err = ns[0].migrator(t).Up(ctx)
			testenv.Must(t, err, "Migrator.Up")
			// goose runs a file's section in one transaction.
			inTx := func(what string, stmts []string) {
				tx, err := ns[1].db.BeginTx(ctx, nil)
				testenv.Must(t, err, "begin")
				for _, s := range stmts {
					_, err := tx.ExecContext(ctx, s)
					testenv.Must(t, err, "goose %s: %s", what, s)
				}
				testenv.Must(t, tx.Commit(), "commit")
			}
			inTx("up", up)
			withoutTracking := func(lines []string) []string {
				return slices.DeleteFunc(lines, func(l string) bool { return strings.Contains(l, "txbox_migrations") })
			}
			if got, want := withoutTracking(ns[1].catalog(t)), withoutTracking(ns[0].catalog(t)); !slices.Equal(got, want) {
				t.Fatalf("goose up differs from Migrator.Up:\n%s", diff(want, got))
			}
			inTx("down", down)
			if left := withoutTracking(ns[1].catalog(t)); len(left) != 0 {
				t.Fatalf("after goose down:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// Tables a newer txbox release migrated further: Status lists its
// migrations as Newer, Down refuses to go below them (only that release
// can revert them), and the relay starts with a warning naming them.
func TestNewerReleaseMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, x := range databases(t) {
		t.Run(string(x.d), func(t *testing.T) {
			m := up(t, x)
			plan, err := txboxmigrate.Plan(x.d, txboxmigrate.Config{})
			testenv.Must(t, err, "plan")
			top := plan[len(plan)-1].Version
			var now any = time.Now().UTC()
			if x.d == txboxdriver.SQLite {
				now = time.Now().UTC().Format(time.RFC3339Nano) // as Record writes it there
			}
			testenv.Must(t, exec(ctx, x.db, x.d, "INSERT INTO txbox_migrations (target, version, name, applied_at) VALUES (?, ?, ?, ?)",
				"outbox:txbox_outbox", top+1, "future", now), "record a newer migration")
			testenv.Must(t, exec(ctx, x.db, x.d, "INSERT INTO txbox_migrations (target, version, name, applied_at) VALUES (?, ?, ?, ?)",
				"outbox:other_outbox", 1, "create_outbox", now), "record another table's migration")
			before := applied(t, m)

			st, err := m.Status(ctx)
			testenv.Must(t, err, "status")
			last := st[len(st)-1]
			if len(st) != len(plan)+1 || !last.Newer || last.Version != top+1 || last.Name != "future" || last.AppliedAt.IsZero() || last.Down != "" {
				t.Fatalf("status ends with %+v (%d rows for %d migrations), want the newer migration %d", last, len(st), len(plan), top+1)
			}
			if _, err := m.Down(ctx, txboxmigrate.DownOptions{To: top - 1}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("version %d (future) was applied by a newer txbox release", top+1)) {
				t.Fatalf("down below a newer migration: %v", err)
			}
			if got := applied(t, m); !slices.Equal(got, before) || len(got) != len(plan)+1 {
				t.Fatalf("a refused down changed the applied migrations: %v, want %v", got, before)
			}
			if rev, err := m.Down(ctx, txboxmigrate.DownOptions{To: top + 1}); err != nil || len(rev) != 0 {
				t.Fatalf("down to the newer version: %v, %v; want nothing to do", rev, err)
			}

			var logs testenv.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			r, err := relay.New(txboxsql.New(x.db, x.d), &drivertest.Recorder{}, relay.Config{Logger: log, DisableNotify: true})
			testenv.Must(t, err, "relay")
			testenv.Must(t, r.Validate(ctx), "validate: a newer release's migrations do not stop this one")
			if want := fmt.Sprintf(`outbox table \"txbox_outbox\" %d (future)`, top+1); !strings.Contains(logs.String(), want) || strings.Contains(logs.String(), "other_outbox") {
				t.Fatalf("relay start-up log lacks %s (or names another table):\n%s", want, logs.String())
			}
		})
	}
}
