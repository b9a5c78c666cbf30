package cli_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// evil are values a row may hold that would reach the terminal: an OSC
// sequence setting the window title, CR/LF faking a table row, a tab
// shifting columns, a C1 CSI, a bidi override, and (SQLite only: PostgreSQL
// text is valid UTF-8) invalid UTF-8.
var evil = struct{ id, topic, key, lastError, invalid string }{
	id:        "m\x1b]0;evil\x07",
	topic:     "order\r\n9\tfake-id\tfake.topic",
	key:       "K\tL\u009b31m\u202e",
	lastError: "boom\r\n10  fake  row\x7f",
	invalid:   "bad\xff\xfeutf8",
}

// checkEscaped fails t if out holds a control character other than the
// table's own newlines, or is not header + rows lines, or lacks the
// escaped forms of the evil values.
func checkEscaped(t *testing.T, out string, rows int, want ...string) {
	t.Helper()
	for _, r := range out {
		if r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' || r == '\uFFFD' {
			t.Errorf("dead list prints the control character %U:\n%q", r, out)
		}
	}
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != rows+1 {
		t.Errorf("dead list prints %d lines, want a header and %d rows:\n%s", len(lines), rows, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("dead list lacks %q:\n%s", w, out)
		}
	}
}

var escapedEvil = []string{`m\x1b]0;evil\a`, `order\r\n9\tfake-id\tfake.topic`, `K\tL\u009b31m\u202e`, `boom\r\n10  fake  row\x7f`}

// txbox dead list escapes control characters and invalid UTF-8 in the
// values it prints from the database (SQLite).
func TestDeadListEscapesSQLite(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "evil.db")
	mustRun(t, "migrate", "up", "--db", db)
	insertEvil(t, strings.TrimPrefix(db, "sqlite://"))
	out := mustRun(t, "dead", "list", "--db", db)
	checkEscaped(t, out, 2, append(escapedEvil, `bad\xff\xfeutf8`)...)
}

// insertEvil adds two dead rows with the evil values to the SQLite file.
func insertEvil(t *testing.T, path string) {
	conn, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
	if err == nil {
		defer conn.Close()
		_, err = conn.Exec(`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, attempts, last_error, dead_at)
			VALUES (?, ?, ?, x'00', 10, ?, 1), (?, 't', NULL, x'00', 10, ?, 1)`,
			evil.id, evil.topic, evil.key, evil.lastError, evil.invalid, evil.invalid)
	}
	testenv.Must(t, err, "insert the evil rows")
}

// The same on PostgreSQL.
func TestDeadListEscapesPostgres(t *testing.T) {
	t.Parallel()
	admin, schema := pgSchema(t)
	db := testenv.PostgresURL()
	mustRun(t, "migrate", "up", "--db", db, "--schema", schema)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := admin.Exec(ctx, `INSERT INTO `+schema+`.txbox_outbox (message_id, topic, ordering_key, payload, attempts, last_error, dead_at)
		VALUES ($1, $2, $3, '\x00', 10, $4, now())`, evil.id, evil.topic, evil.key, evil.lastError)
	testenv.Must(t, err, "insert")
	out := mustRun(t, "dead", "list", "--db", db, "--schema", schema)
	checkEscaped(t, out, 1, escapedEvil...)
	// migrate status prints a table too; its values are escaped as well.
	checkStatus(t, mustRun(t, "migrate", "status", "--db", db, "--schema", schema), true)
}

// An error echoing a value (here a --table name) reaches the terminal with
// its control characters escaped.
func TestErrorsEscaped(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "e.db")
	for _, args := range [][]string{
		{"migrate", "status", "--db", db, "--table", "t\x1b]0;evil\x07"},
		{"dead", "discard", "--db", db, "1\r\ntxbox: ok\x1b[2K"},
		{"relay", "--db", db, "--stream", "S\x1b]0;evil\x07"},
	} {
		out, code := mainOutput(context.Background(), args...)
		if code == 0 {
			t.Errorf("txbox %q succeeded", args)
		}
		if strings.ContainsAny(out, "\x1b\x07\r") || strings.Count(out, "\n") != 1 {
			t.Errorf("txbox %q prints control characters:\n%q", args, out)
		}
		if !strings.Contains(out, `\x1b`) {
			t.Errorf("txbox %q: the escaped value is missing:\n%q", args, out)
		}
	}
}
