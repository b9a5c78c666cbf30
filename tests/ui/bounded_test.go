package ui_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxui"
)

// Pages stay bounded: 100 dead messages with a megabyte of last error each
// (60 KB on MySQL, whose column holds 64 KB) make a page, a fragment and a
// JSON state that grow with the rows, not with the errors; the list reads
// only the cut values. Each message's own page shows each value whole up to
// ValueCap bytes, says where it cut, and escapes what is not printable.
// Against PostgreSQL, MySQL and SQLite.
func TestDeadPagesBounded(t *testing.T) {
	t.Parallel()
	const rows, payload = 100, 1 << 20
	type db struct {
		name    string
		dialect txboxdriver.Dialect
		errLen  int
		insert  string // args: message id, error prefix, error length, payload length (MySQL: see below)
	}
	for _, d := range []db{
		{"postgres", txboxdriver.Postgres, 1 << 20,
			`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, attempts, last_error, dead_at)
			 VALUES ($1, 'big', $1, convert_to(repeat('p', $4), 'UTF8'), 10, $2 || repeat('e', $3), now())`},
		{"mysql", txboxdriver.MySQL, 60000,
			`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, attempts, last_error, dead_at)
			 VALUES (?, 'big', ?, REPEAT('p', ?), 10, CONCAT(?, REPEAT('e', ?)), UTC_TIMESTAMP(6))`},
		{"sqlite", txboxdriver.SQLite, 1 << 20,
			`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, attempts, last_error, dead_at)
			 VALUES (?1, 'big', ?1, CAST(replace(hex(zeroblob(?4 / 2)), '0', 'p') AS BLOB), 10, ?2 || replace(hex(zeroblob(?3 / 2)), '0', 'e'), 1)`},
	} {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var letters *dead.Letters
			var pool txboxdriver.Pool
			switch d.dialect {
			case txboxdriver.Postgres:
				drv := testenv.PgxDriver(t, 4)
				pool, letters = drv.Pool(), migrated(t, drv, dead.New[pgx.Tx])
			default:
				var sdb *sql.DB
				if d.dialect == txboxdriver.MySQL {
					sdb = testenv.MySQL(t)
				} else {
					sdb = testenv.SQLite(t)
				}
				drv := txboxsql.New(sdb, d.dialect)
				pool, letters = drv.Pool(), migrated(t, drv, dead.New[*sql.Tx])
			}
			exec := func(q string, args ...any) error { _, err := pool.Exec(ctx, q, args...); return err }
			for i := range rows {
				id := fmt.Sprintf("m-%03d", i)
				args := []any{id, "\u202eboom\x1b[31m ", d.errLen, payload}
				if d.dialect == txboxdriver.MySQL {
					args = []any{id, id, payload, "\u202eboom\x1b[31m ", d.errLen}
				}
				testenv.Must(t, exec(d.insert, args...), "insert dead row %d", i)
			}
			h, err := txboxui.New(txboxui.Config{Dead: letters})
			testenv.Must(t, err, "txboxui.New")
			srv := httptest.NewServer(h)
			defer srv.Close()
			get := func(path string) (int, string) {
				resp, err := http.Get(srv.URL + path)
				testenv.Must(t, err, "GET %s", path)
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			// A bound proportional to the rows: 8 KiB a row, 64 KiB besides.
			bound := rows*8<<10 + 64<<10
			for _, path := range []string{"/", "/?fragment=1", "/api/state"} {
				code, body := get(path)
				t.Logf("%s: GET %s: %d bytes for %d dead rows of %d-byte errors (bound %d)", d.name, path, len(body), rows, d.errLen+len("\u202eboom\x1b[31m "), bound)
				if code != http.StatusOK || len(body) > bound || strings.Count(body, "m-0") < rows {
					t.Errorf("GET %s: %d, %d bytes (bound %d)", path, code, len(body), bound)
				}
				if path != "/api/state" && (strings.Contains(body, "\u202e") || !strings.Contains(body, `\u202eboom\x1b[31m`) ||
					!strings.Contains(body, fmt.Sprintf("(%d bytes)", d.errLen+len("\u202eboom\x1b[31m ")))) {
					t.Errorf("GET %s: the cut error is not escaped or does not give its length", path)
				}
			}
			list, err := letters.List(ctx, 1)
			testenv.Must(t, err, "dead list")
			code, page := get(fmt.Sprintf("/dead/%d", list[0].Seq))
			t.Logf("%s: GET /dead/%d: %d bytes", d.name, list[0].Seq, len(page))
			if code != http.StatusOK || len(page) > 2*txboxui.ValueCap+32<<10 || strings.Contains(page, "\u202e") ||
				!strings.Contains(page, fmt.Sprintf("the first %d of its %d bytes", txboxui.ValueCap, payload)) {
				t.Errorf("GET /dead/%d: %d, %d bytes (bound %d), or no note of the cut payload:\n%.2000s", list[0].Seq, code, len(page), 2*txboxui.ValueCap+32<<10, page)
			}
			if d.errLen > txboxui.ValueCap && !strings.Contains(page, fmt.Sprintf("the first %d of its %d bytes", txboxui.ValueCap, d.errLen+len("\u202eboom\x1b[31m "))) {
				t.Errorf("GET /dead/%d: no note of the cut error", list[0].Seq)
			}
			if code, _ := get("/dead/999999"); code != http.StatusNotFound {
				t.Errorf("GET /dead/999999: %d, want 404", code)
			}
		})
	}
}

// migrated migrates drv's outbox table and returns its dead letters.
func migrated[TTx any](t *testing.T, drv txboxdriver.Driver[TTx], newLetters func(txboxdriver.Driver[TTx], txbox.Config) (*dead.Letters, error)) *dead.Letters {
	t.Helper()
	migrateOutbox(t, drv)
	letters, err := newLetters(drv, txbox.Config{})
	testenv.Must(t, err, "dead.New")
	return letters
}

// migrateOutbox migrates drv's outbox table.
func migrateOutbox[TTx any](t *testing.T, drv txboxdriver.Driver[TTx]) {
	t.Helper()
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
}
