package txbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

func sqlOutbox(t *testing.T, db *sql.DB, d txboxdriver.Dialect, cfg txbox.Config) *txbox.Outbox[*sql.Tx] {
	t.Helper()
	drv := txboxsql.New(db, d)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "migrate")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, cfg)
	testenv.Must(t, err, "txbox.New")
	return ob
}

func count(t *testing.T, db *sql.DB) int {
	var n int
	testenv.Must(t, db.QueryRow("SELECT count(*) FROM txbox_outbox").Scan(&n), "count")
	return n
}

// Bad input is a clear, typed error, and nothing of the call is written even
// when the transaction then commits.
func TestAddRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	dbs := map[string]func(t *testing.T) (*sql.DB, txboxdriver.Dialect){
		"postgres": func(t *testing.T) (*sql.DB, txboxdriver.Dialect) {
			db, _ := testenv.PostgresDB(t, 4)
			return db, txboxdriver.Postgres
		},
		"sqlite": func(t *testing.T) (*sql.DB, txboxdriver.Dialect) { return testenv.SQLite(t), txboxdriver.SQLite },
	}
	ok := txbox.Message{Topic: "fine", Payload: []byte("x")}
	cases := []struct {
		name   string
		msg    txbox.Message
		target error
		says   string
	}{
		{"empty topic", txbox.Message{Payload: []byte("x")}, txbox.ErrInvalidMessage, "topic is empty"},
		{"payload over cap", txbox.Message{Topic: "t", Payload: make([]byte, 1<<20+1)}, txbox.ErrPayloadTooLarge, "over the cap of 1047552"},
		{"payload of exactly 1 MiB (NATS refuses it: its limit counts its headers)", txbox.Message{Topic: "t", Payload: make([]byte, 1<<20)}, txbox.ErrPayloadTooLarge, "over the cap of 1047552"},
		{"headers push it over the cap", txbox.Message{Topic: "t", Payload: make([]byte, 1<<20-1<<10-10), Headers: map[string]string{"h": strings.Repeat("v", 100)}}, txbox.ErrPayloadTooLarge, "payload and headers are"},
		{"space in header name", txbox.Message{Topic: "t", Headers: map[string]string{"bad key": "1"}}, txbox.ErrInvalidMessage, `name "bad key" has ' '`},
		{"slash in header name", txbox.Message{Topic: "t", Headers: map[string]string{"a/b": "1"}}, txbox.ErrInvalidMessage, "a header name is letters"},
		{"colon in header name", txbox.Message{Topic: "t", Headers: map[string]string{"a:b": "1"}}, txbox.ErrInvalidMessage, "a header name is letters"},
		{"non-ASCII header name", txbox.Message{Topic: "t", Headers: map[string]string{"größe": "1"}}, txbox.ErrInvalidMessage, "a header name is letters"},
		{"leading space in header name", txbox.Message{Topic: "t", Headers: map[string]string{" a": "1"}}, txbox.ErrInvalidMessage, "a header name is letters"},
		{"empty header name", txbox.Message{Topic: "t", Headers: map[string]string{"": "1"}}, txbox.ErrInvalidMessage, "empty name"},
		{"leading space in header value (NATS trims it)", txbox.Message{Topic: "t", Headers: map[string]string{"a": " b"}}, txbox.ErrInvalidMessage, "white space"},
		{"trailing tab in header value", txbox.Message{Topic: "t", Headers: map[string]string{"a": "b\t"}}, txbox.ErrInvalidMessage, "white space"},
		{"invalid UTF-8 in header value", txbox.Message{Topic: "t", Headers: map[string]string{"a": "\xff"}}, txbox.ErrInvalidMessage, "not valid UTF-8"},
		{"space in topic", txbox.Message{Topic: "orders placed"}, txbox.ErrInvalidMessage, "white space"},
		{"topic too long", txbox.Message{Topic: strings.Repeat("t", 5000)}, txbox.ErrInvalidMessage, "over the limit of 256"},
		{"invalid UTF-8 in key", txbox.Message{Topic: "t", Key: "k\xff"}, txbox.ErrInvalidMessage, "not valid UTF-8"},
		{"tab in id", txbox.Message{ID: "a\tb", Topic: "t"}, txbox.ErrInvalidMessage, "control character"},
		{"CR LF in id", txbox.Message{ID: "a\r\nb", Topic: "t"}, txbox.ErrInvalidMessage, "control character"},
		{"header sets message id", txbox.Message{Topic: "t", Headers: map[string]string{"Nats-Msg-Id": "forged"}}, txbox.ErrReservedHeader, "reserved"},
		{"header Message-Id", txbox.Message{Topic: "t", Headers: map[string]string{"message-id": "forged"}}, txbox.ErrReservedHeader, "reserved"},
		{"control character in topic", txbox.Message{Topic: "a\x00b"}, txbox.ErrInvalidMessage, "control character"},
		{"id too long", txbox.Message{ID: strings.Repeat("x", 257), Topic: "t"}, txbox.ErrInvalidMessage, "over the limit of 256"},
		{"newline in header value", txbox.Message{Topic: "t", Headers: map[string]string{"a": "b\r\nNats-Msg-Id: x"}}, txbox.ErrInvalidMessage, "control character"},
	}
	for name, open := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, d := open(t)
			ob := sqlOutbox(t, db, d, txbox.Config{})
			for _, c := range cases {
				tx, err := db.Begin()
				testenv.Must(t, err, "begin")
				_, err = ob.Add(context.Background(), tx, ok, c.msg)
				testenv.Must(t, tx.Commit(), "commit")
				if !errors.Is(err, c.target) || !strings.Contains(err.Error(), c.says) {
					t.Errorf("%s: got %v, want %v saying %q", c.name, err, c.target, c.says)
				}
				var ime *txbox.InvalidMessageError
				if !errors.As(err, &ime) || ime.Index != 1 {
					t.Errorf("%s: error %v does not point at message 1", c.name, err)
				}
				if n := count(t, db); n != 0 {
					t.Fatalf("%s: %d rows written, want none", c.name, n)
				}
			}
		})
	}
}

func TestInvalidTableName(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	drv := txboxsql.New(db, txboxdriver.SQLite)
	for _, name := range []string{"bad-name", "x; DROP TABLE y", `a"b`, "1abc", strings.Repeat("a", 64)} {
		if _, err := txbox.New(drv, txbox.Config{Table: name}); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("table %q: got %v, want ErrInvalidConfig", name, err)
		}
		if _, err := txboxmigrate.New(drv, txboxmigrate.Config{OutboxTable: name}); err == nil {
			t.Errorf("migrate accepted table %q", name)
		}
	}
	if _, err := txbox.New(drv, txbox.Config{Schema: "s"}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("a schema on SQLite was accepted: %v", err)
	}
}

// Add gives messages without an id a UUIDv7, keeps ids callers set, and
// stores topic, key, payload and headers as given; many messages are one
// statement.
func TestAddStoresMessages(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 4)
	drv := txboxpgx.New(pool)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{OutboxTable: "events"})
	testenv.Must(t, err, "migrate")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "up")
	ob, err := txbox.New(drv, txbox.Config{Table: "events", MaxMessageBytes: 10})
	testenv.Must(t, err, "new")
	ctx := context.Background()
	msgs := []txbox.Message{
		{Topic: "a", Key: "k1", Payload: []byte("1"), Headers: map[string]string{"h": "v"}},
		{ID: "my-id", Topic: "b", Payload: []byte("2")},
	}
	tx, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	ids, err := ob.Add(ctx, tx, msgs...)
	testenv.Must(t, err, "add")
	testenv.Must(t, tx.Commit(ctx), "commit")
	if u, err := uuid.Parse(ids[0]); err != nil || u.Version() != 7 {
		t.Fatalf("generated id %q is not a UUIDv7", ids[0])
	}
	if ids[1] != "my-id" {
		t.Fatalf("caller's id replaced by %q", ids[1])
	}
	if msgs[0].ID != "" {
		t.Fatalf("Add wrote id %q into the caller's message", msgs[0].ID)
	}
	rows, err := pool.Query(ctx, "SELECT message_id, topic, coalesce(ordering_key, ''), payload, headers->>'h' FROM events ORDER BY topic")
	testenv.Must(t, err, "query")
	var got []string
	for rows.Next() {
		var id, topic, key, h sql.NullString
		var payload []byte
		testenv.Must(t, rows.Scan(&id, &topic, &key, &payload, &h), "scan")
		got = append(got, strings.Join([]string{id.String, topic.String, key.String, string(payload), h.String}, "|"))
	}
	want := []string{ids[0] + "|a|k1|1|v", "my-id|b||2|"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := ob.AddNoTx(ctx, txbox.Message{Topic: "c", Payload: make([]byte, 11)}); !errors.Is(err, txbox.ErrPayloadTooLarge) {
		t.Fatalf("configured cap not applied: %v", err)
	}
}
