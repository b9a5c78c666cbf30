package cli_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/tests/testenv"
)

// A mistyped SQLite path is an error saying the file does not exist, and
// the commands that only read or change existing rows (migrate status, dead
// list, redrive, discard) do not create the file; migrate up does.
func TestMissingSQLiteFileIsNotCreated(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "typo.db")
	db := "sqlite://" + path
	for _, args := range [][]string{
		{"migrate", "status", "--db", db},
		{"dead", "list", "--db", db},
		{"dead", "redrive", "--db", db, "1"},
		{"dead", "discard", "--db", db, "1"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _, err := run(ctx, args...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("txbox %s: err = %v, want the file does not exist", strings.Join(args, " "), err)
		}
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("txbox %s created %s (stat: %v)", strings.Join(args, " "), p, err)
			}
		}
	}
	if out := mustRun(t, "migrate", "up", "--db", db); !strings.Contains(out, "applied outbox:txbox_outbox 001") {
		t.Fatalf("migrate up: %s", out)
	}
	checkStatus(t, mustRun(t, "migrate", "status", "--db", db), true)
	mustRun(t, "dead", "list", "--db", db)
}

// migrate sql --schema prints the CREATE SCHEMA the rest needs: the
// script runs as it is on a database without the schema.
func TestMigrateSQLSchemaScriptRuns(t *testing.T) {
	t.Parallel()
	admin, schema := pgSchema(t)
	script := mustRun(t, "migrate", "sql", "--dialect", "postgres", "--schema", schema)
	if i := strings.Index(script, `CREATE SCHEMA IF NOT EXISTS "`+schema+`";`); i < 0 || i > strings.Index(script, "CREATE TABLE") {
		t.Fatalf("script does not begin with CREATE SCHEMA:\n%.400s", script)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := admin.Acquire(ctx)
	testenv.Must(t, err, "acquire")
	defer conn.Release()
	_, err = conn.Conn().PgConn().Exec(ctx, script).ReadAll()
	testenv.Must(t, err, "run the script")
	_, err = admin.Exec(ctx, `INSERT INTO `+schema+`.txbox_outbox (topic, payload) VALUES ('t', 'p')`)
	testenv.Must(t, err, "insert into the scripted table")
}
