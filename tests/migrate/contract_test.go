// Package migrate_test tries to break the outbox table's own checks of the
// message contract (txboxmigrate/sql/<dialect>/outbox/*_contract.sql): plain-SQL
// writers get an error naming the rule, and the migration succeeds on a
// table that already holds rows breaking it. The lanes migration, too, is
// run on a table that holds rows (lanes_test.go).
package migrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

type dialectDB struct {
	d  txboxdriver.Dialect
	db *sql.DB
}

func databases(t *testing.T) []dialectDB {
	pg, _ := testenv.PostgresDB(t, 4)
	return []dialectDB{
		{txboxdriver.Postgres, pg},
		{txboxdriver.SQLite, testenv.SQLite(t)},
		{txboxdriver.MySQL, testenv.MySQL(t)},
	}
}

// exec runs q, written with ? placeholders, on dialect d.
func exec(ctx context.Context, db *sql.DB, d txboxdriver.Dialect, q string, args ...any) error {
	if d == txboxdriver.Postgres {
		var b strings.Builder
		n := 0
		for _, c := range q {
			if c == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(c)
		}
		q = b.String()
	}
	_, err := db.ExecContext(ctx, q, args...)
	return err
}

func up(t *testing.T, x dialectDB) *txboxmigrate.Migrator {
	t.Helper()
	m, err := txboxmigrate.New(txboxsql.New(x.db, x.d), txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "up")
	return m
}

// insert adds a row to the outbox table with plain SQL: cols, and a value
// for each.
func insert(t *testing.T, x dialectDB, cols string, vals ...any) {
	t.Helper()
	q := "INSERT INTO txbox_outbox (" + cols + ") VALUES (?" + strings.Repeat(", ?", len(vals)-1) + ")"
	testenv.Must(t, exec(context.Background(), x.db, x.d, q, vals...), "insert %v", vals)
}

func TestContractRefusesBadInserts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	all := []txboxdriver.Dialect{txboxdriver.Postgres, txboxdriver.SQLite, txboxdriver.MySQL}
	cases := []struct {
		name     string
		col      string
		val      any
		dialects []txboxdriver.Dialect // nil: all
		want     map[txboxdriver.Dialect]string
	}{
		{"empty id", "message_id", "", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "message_id_length", txboxdriver.MySQL: "message_id_length"}},
		{"300-byte id", "message_id", strings.Repeat("a", 300), nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "message_id_length", txboxdriver.MySQL: "Data too long for column 'message_id'"}},
		{"300-byte id of 100 characters", "message_id", strings.Repeat("€", 100), nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "message_id_length", txboxdriver.MySQL: "message_id_length"}},
		{"id with tab", "message_id", "a\tb", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "message_id_control", txboxdriver.MySQL: "message_id_control"}},
		{"id as blob", "message_id", []byte("abc"), []txboxdriver.Dialect{txboxdriver.SQLite}, nil},
		{"empty topic", "topic", "", nil, nil},
		{"5000-char topic", "topic", strings.Repeat("t", 5000), nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_length"}},
		{"topic with space", "topic", "a b", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with newline", "topic", "a\nb", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with U+0085", "topic", "a\u0085b", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with U+1680", "topic", "a\u1680b", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with U+2000", "topic", "a\u2000b", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with U+2005", "topic", "a\u2005b", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with U+200A", "topic", "a\u200ab", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with U+202F", "topic", "a\u202fb", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with U+205F", "topic", "a\u205fb", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"topic with U+3000", "topic", "a\u3000b", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "topic_chars", txboxdriver.MySQL: "topic_chars"}},
		{"empty key", "ordering_key", "", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "ordering_key_length", txboxdriver.MySQL: "ordering_key_length"}},
		{"300-byte key", "ordering_key", strings.Repeat("k", 300), nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "ordering_key_length", txboxdriver.MySQL: "Data too long for column 'ordering_key'"}},
		{"300-byte key of 100 characters", "ordering_key", strings.Repeat("€", 100), nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "ordering_key_length", txboxdriver.MySQL: "ordering_key_length"}},
		{"key with DEL", "ordering_key", "k\x7f", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "ordering_key_control", txboxdriver.MySQL: "ordering_key_control"}},
		{"headers array", "headers", "[1]", nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "headers_object", txboxdriver.MySQL: "headers_object"}},
		{"headers string", "headers", `"x"`, nil, map[txboxdriver.Dialect]string{txboxdriver.Postgres: "headers_object", txboxdriver.MySQL: "headers_object"}},
		{"headers not JSON", "headers", "nope", []txboxdriver.Dialect{txboxdriver.SQLite, txboxdriver.MySQL}, map[txboxdriver.Dialect]string{txboxdriver.MySQL: "headers_object"}},
		{"attempts text", "attempts", "abc", []txboxdriver.Dialect{txboxdriver.SQLite}, nil},
		{"attempts real", "attempts", 1.5, []txboxdriver.Dialect{txboxdriver.SQLite}, nil},
		{"created_at text", "created_at", "abc", []txboxdriver.Dialect{txboxdriver.SQLite}, nil},
		{"next_attempt_at text", "next_attempt_at", "abc", []txboxdriver.Dialect{txboxdriver.SQLite}, nil},
		{"published_at text", "published_at", "abc", []txboxdriver.Dialect{txboxdriver.SQLite}, nil},
		{"dead_at text", "dead_at", "abc", []txboxdriver.Dialect{txboxdriver.SQLite}, nil},
		{"payload integer", "payload", 42, []txboxdriver.Dialect{txboxdriver.SQLite}, nil},
	}
	for _, x := range databases(t) {
		t.Run(string(x.d), func(t *testing.T) {
			up(t, x)
			for _, c := range cases {
				if c.dialects == nil {
					c.dialects = all
				}
				run := false
				for _, d := range c.dialects {
					run = run || d == x.d
				}
				if !run {
					continue
				}
				cols, vals := []string{"topic", "payload"}, []any{"t", []byte("p")}
				if c.col == "topic" || c.col == "payload" {
					cols, vals = cols[:1], vals[:1]
					if c.col == "topic" {
						cols, vals = []string{"payload"}, []any{[]byte("p")}
					}
				}
				cols, vals = append(cols, c.col), append(vals, c.val)
				q := "INSERT INTO txbox_outbox (" + strings.Join(cols, ", ") + ") VALUES (?" + strings.Repeat(", ?", len(cols)-1) + ")"
				err := exec(ctx, x.db, x.d, q, vals...)
				want := c.want[x.d]
				if want == "" {
					want = c.col
				}
				if err == nil {
					t.Errorf("%s: INSERT accepted", c.name)
				} else if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error %q does not name %q", c.name, err, want)
				}
			}
			// What is valid still goes in: only topic and payload, and
			// everything Outbox.Add writes.
			testenv.Must(t, exec(ctx, x.db, x.d, "INSERT INTO txbox_outbox (topic, payload) VALUES (?, ?)", "orders.placed", []byte("p")), "plain insert")
			// Next to the white space refused, characters that are not white
			// space (U+1FFF, U+200B, U+2010, U+3001) and a one-byte key.
			testenv.Must(t, exec(ctx, x.db, x.d, "INSERT INTO txbox_outbox (topic, ordering_key, payload) VALUES (?, ?, ?)", "a\u1fffb\u200bc\u2010d\u3001e", "k", []byte("p")), "plain insert of a topic without white space")
			ob, err := txbox.New(txboxsql.New(x.db, x.d), txbox.Config{})
			testenv.Must(t, err, "outbox")
			testenv.Must(t, testenv.Err(ob.AddNoTx(ctx,
				txbox.Message{Topic: "orders.placed", Key: strings.Repeat("€", 85), Payload: nil},
				txbox.Message{ID: strings.Repeat("i", 256), Topic: strings.Repeat("t", 256), Headers: map[string]string{"a": "b\tc"}, Payload: []byte("p")},
			)), "Add")
			var n int
			testenv.Must(t, x.db.QueryRowContext(ctx, "SELECT count(*) FROM txbox_outbox").Scan(&n), "count")
			if n != 4 {
				t.Fatalf("%d rows, want 4", n)
			}
		})
	}
}
