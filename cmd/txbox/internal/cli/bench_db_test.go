package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// Every bench subcommand measures PostgreSQL: a MySQL, MariaDB or SQLite
// --db is refused by name before any service is touched, not handed to pgx.
func TestBenchNeedsPostgres(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite://" + filepath.Join(t.TempDir(), "b.db")
	for _, which := range []string{"drain", "add", "order", "latency", "brokers", "scale", "all"} {
		for _, db := range []struct{ url, dialect string }{
			{"mysql://root:secret@127.0.0.1:1/test", "mysql"},
			{"mariadb://root@127.0.0.1:1/test", "mysql"},
			{sqlite, "sqlite"},
		} {
			out, _, err := run(context.Background(), "bench", which, "--db", db.url, "--broker", "nats://127.0.0.1:1")
			want := "txbox bench needs PostgreSQL: --db is a " + db.dialect + " database (want postgres://…)"
			if err == nil || !strings.Contains(err.Error(), want) || out != "" || strings.Contains(err.Error(), "secret") {
				t.Errorf("bench %s --db %s: %v, printed %q; want %q", which, db.url, err, out, want)
			}
		}
	}
}
