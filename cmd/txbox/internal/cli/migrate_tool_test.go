package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/cmd/txbox/internal/cli"
	"github.com/txbox/txbox/tests/testenv"
)

// The recipe of docs/reference/cli.md, "Migrating with another tool", as it is
// written there: migrate sql, psql -f (no -1), then migrate status shows
// every migration applied and migrate up has nothing to do. Then a column
// retyped by hand: status names it and what to run, and exits non-zero;
// up does not call the schema up to date.
func TestMigrateWithAnotherToolRecipe(t *testing.T) {
	t.Parallel()
	admin, schema := pgSchema(t)
	if _, err := exec.LookPath("psql"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("psql is not installed and CI=true")
		}
		t.Skip("psql is not installed")
	}
	db := testenv.PostgresURL()
	file := filepath.Join(t.TempDir(), "txbox.sql")
	script := mustRun(t, "migrate", "sql", "--dialect", "postgres", "--schema", schema)
	testenv.Must(t, os.WriteFile(file, []byte(script), 0o600), "write")
	if out, err := exec.Command("psql", "-X", "-v", "ON_ERROR_STOP=1", "-f", file, db).CombinedOutput(); err != nil || strings.Contains(string(out), "ERROR") {
		t.Fatalf("psql -f: %v\n%s", err, out)
	}
	status := mustRun(t, "migrate", "status", "--db", db, "--schema", schema)
	if strings.Contains(status, "pending") {
		t.Fatalf("migrate status after psql -f:\n%s", status)
	}
	checkStatus(t, status, true)
	if out := mustRun(t, "migrate", "up", "--db", db, "--schema", schema); !strings.Contains(out, "is up to date (schema "+schema+": outbox txbox_outbox)") {
		t.Fatalf("migrate up after psql -f: %s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := admin.Exec(ctx, "ALTER TABLE "+schema+".txbox_outbox ALTER COLUMN published_at TYPE text")
	testenv.Must(t, err, "retype")
	for _, cmd := range []string{"status", "up"} {
		out, _, err := run(ctx, "migrate", cmd, "--db", db, "--schema", schema)
		if err == nil || !strings.Contains(err.Error(), "column published_at is text") || !strings.Contains(err.Error(), "txbox migrate down --to 0 --force --schema "+schema) {
			t.Fatalf("migrate %s on a retyped column: %v", cmd, err)
		}
		if strings.Contains(out, "up to date") {
			t.Fatalf("migrate %s calls a retyped column up to date: %s", cmd, out)
		}
	}
}

// txbox relay on an outbox table it cannot use (a retyped column, a trigger
// that refuses its UPDATE) exits 1 at once, naming the reason, instead of
// failing every round.
func TestRelayRefusesATableItCannotUse(t *testing.T) {
	t.Parallel()
	srv := testenv.EmbeddedNATS(t)
	for name, breakIt := range map[string][]string{
		"retyped column": {"ALTER TABLE %s.txbox_outbox ALTER COLUMN attempts TYPE text"},
		"trigger refusing UPDATE": {
			"CREATE FUNCTION %s.no_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'updates are audited'; END $$",
			"CREATE TRIGGER no_update BEFORE UPDATE ON %[1]s.txbox_outbox FOR EACH ROW EXECUTE FUNCTION %[1]s.no_update()"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			admin, schema := pgSchema(t)
			mustRun(t, "migrate", "up", "--db", testenv.PostgresURL(), "--schema", schema)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, q := range breakIt {
				_, err := admin.Exec(ctx, fmt.Sprintf(q, schema))
				testenv.Must(t, err, "%s", q)
			}
			var out, errOut bytes.Buffer
			code := cli.Main(ctx, []string{"relay", "--broker", srv.ClientURL(), "--stream", "BROKEN", "--stream-subjects", "broken.>",
				"--db", testenv.PostgresURL(), "--schema", schema}, &out, &errOut)
			want := map[string]string{"retyped column": "column attempts is text", "trigger refusing UPDATE": "updates are audited"}[name]
			if code != 1 || !strings.Contains(errOut.String(), "relay cannot start") || !strings.Contains(errOut.String(), want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant 1 and %q", code, errOut.String(), want)
			}
		})
	}
}
