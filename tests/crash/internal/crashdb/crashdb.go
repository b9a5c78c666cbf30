// Package crashdb is what the crash harness's programs and its test share:
// opening the database from a URL, the harness's own tables, and
// placeholder rewriting for the two dialects.
package crashdb

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL through database/sql
	_ "modernc.org/sqlite"             // the SQLite engine

	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// Open opens url: postgres://… (pgx through database/sql; unknown query
// parameters such as search_path become session settings) or sqlite:PATH
// (WAL, a busy timeout and immediate transactions, as txbox recommends).
func Open(url string) (*sql.DB, txboxdriver.Dialect, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		path = strings.TrimPrefix(path, "//")
		db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(path))
		return db, txboxdriver.SQLite, err
	}
	db, err := sql.Open("pgx", url)
	return db, txboxdriver.Postgres, err
}

// Q rewrites the ? placeholders of query for dialect d ($1, $2, … on
// PostgreSQL).
func Q(d txboxdriver.Dialect, query string) string {
	if d != txboxdriver.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// CreateTables creates the harness's tables: crash_orders, the business
// rows (one per committed message: key, per-key version, message id,
// written in the transaction of the message's Add), and crash_effects, the
// consumer's effects (one row per handler run that committed; no unique
// constraint, so a double effect is visible; id orders them).
func CreateTables(ctx context.Context, db *sql.DB, d txboxdriver.Dialect) error {
	id := "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
	if d == txboxdriver.SQLite {
		id = "id INTEGER PRIMARY KEY AUTOINCREMENT"
	}
	for _, s := range []string{
		`CREATE TABLE crash_orders (key text NOT NULL, version integer NOT NULL, msg_id text NOT NULL, committed_us bigint NOT NULL, PRIMARY KEY (key, version))`,
		`CREATE TABLE crash_effects (` + id + `, key text NOT NULL, version integer NOT NULL, msg_id text NOT NULL, applied_us bigint NOT NULL, pid integer NOT NULL)`,
		`CREATE INDEX crash_effects_key ON crash_effects (key, version)`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("crashdb: %s: %w", s, err)
		}
	}
	return nil
}

// MsgID is the message id of a key's version, also the payload.
func MsgID(key string, version int) string { return key + "/" + strconv.Itoa(version) }

// ParseMsgID splits a MsgID.
func ParseMsgID(id string) (key string, version int, err error) {
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return "", 0, fmt.Errorf("crashdb: %q is not KEY/VERSION", id)
	}
	version, err = strconv.Atoi(id[i+1:])
	return id[:i], version, err
}
