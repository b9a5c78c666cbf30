// Package testenv gives txbox's tests their real services, each isolated per
// test: a fresh PostgreSQL schema, a fresh SQLite file, a NATS connection.
// A service that is unreachable skips the test on a developer's machine and
// fails it when CI=true.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	_ "modernc.org/sqlite" // the SQLite engine the tests use

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsembed"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// Environment variables that point tests at services.
const (
	EnvPostgres = "TXBOX_TEST_POSTGRES" // default postgres://postgres@127.0.0.1:5432/test
	EnvNATS     = "TXBOX_TEST_NATS"     // default nats://127.0.0.1:4222
	EnvMySQL    = "TXBOX_TEST_MYSQL"    // go-sql-driver DSN; default root@tcp(127.0.0.1:3306)/
)

// Unavailable skips t, or fails it under CI=true, because a service is down.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is unreachable and CI=true: %v", service, err)
	}
	t.Skipf("%s is unreachable (start it, or set the env var): %v", service, err)
}

// Name returns a unique lower-case identifier with the given prefix, for
// schemas, tables, streams and subjects.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// PostgresURL is the URL of the test database.
func PostgresURL() string {
	if u := os.Getenv(EnvPostgres); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Postgres returns a pool whose search_path is a new schema of its own,
// dropped when the test ends, and the schema's name.
func Postgres(t testing.TB, maxConns int) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, PostgresURL())
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		Unavailable(t, "PostgreSQL", err)
	}
	schema := Name("txt")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		t.Fatalf("create schema: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if maxConns > 0 {
		cfg.MaxConns = int32(maxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ClosePool(t, pool)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	return pool, schema
}

// poolCloseWait bounds how long ClosePool waits for connections still in
// use.
const poolCloseWait = 10 * time.Second

// ClosePool closes pool, and fails the test if some of its connections are
// still acquired poolCloseWait later: pgxpool.Close waits for every one to
// be released, so rows left open or a transaction never ended (after a
// t.Fatal, say) made the test hang until go test's timeout, with no word
// of which test held the connection. The pool is left to close alone.
func ClosePool(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(poolCloseWait):
		t.Errorf("%d PostgreSQL connection(s) still in use %s after the test ended: rows not closed or a transaction not ended", pool.Stat().AcquiredConns(), poolCloseWait)
	}
}

// PostgresDB is Postgres as a *sql.DB (through pgx's stdlib).
func PostgresDB(t testing.TB, maxConns int) (*sql.DB, string) {
	pool, schema := Postgres(t, maxConns)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	return db, schema
}

// SQLite returns a *sql.DB on a new SQLite file in t's temp dir.
func SQLite(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(t.TempDir(), "txbox.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// NATSURL is the URL of the shared NATS server.
func NATSURL() string {
	if u := os.Getenv(EnvNATS); u != "" {
		return u
	}
	return nats.DefaultURL
}

// NATS connects to the shared NATS server with JetStream.
func NATS(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(NATSURL(), nats.Timeout(5*time.Second))
	if err != nil {
		Unavailable(t, "NATS", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// EmbeddedNATS starts an embedded NATS server with JetStream in t's temp dir.
func EmbeddedNATS(t testing.TB) *natsembed.Server {
	t.Helper()
	s, err := natsembed.Start(natsembed.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Subject returns a unique subject prefix ("t_xxxx.") for a test.
func Subject() string { return strings.ToUpper(Name("T")) + "." }

// Must fails t on err.
func Must(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// MySQLDSN is the go-sql-driver DSN of the test server, without a database.
func MySQLDSN() string {
	if u := os.Getenv(EnvMySQL); u != "" {
		return u
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// MySQL returns a *sql.DB on a new database of its own (CREATE DATABASE
// txt_…), dropped when the test ends. The DSN asks for parseTime=true and
// multiStatements=false; extra holds more DSN parameters ("clientFoundRows=true").
func MySQL(t testing.TB, extra ...string) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base, err := mysqldrv.ParseDSN(MySQLDSN())
	if err != nil {
		t.Fatalf("%s: %v", EnvMySQL, err)
	}
	base.DBName = ""
	base.ParseTime = true
	base.MultiStatements = false
	admin, err := sql.Open("mysql", base.FormatDSN())
	if err == nil {
		err = admin.PingContext(ctx)
	}
	if err != nil {
		Unavailable(t, "MySQL", err)
	}
	name := Name("txt")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		t.Fatalf("create database: %v", err)
	}
	cfg := base.Clone()
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	for _, e := range extra {
		dsn += "&" + e
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() {
		_ = db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+name); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
		_ = admin.Close()
	})
	return db
}

// PgxDriver returns a txboxpgx driver over a pool of conns connections
// whose search_path is a new schema of its own (see Postgres).
func PgxDriver(t testing.TB, conns int) *txboxpgx.Driver {
	pool, _ := Postgres(t, conns)
	return txboxpgx.New(pool)
}

// PublishFailsTransiently publishes two messages through p, whose broker
// is unreachable, and checks that both fail with a transient error (never
// txbox.Reject): an outage costs no attempt.
func PublishFailsTransiently(t *testing.T, p txbox.Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := p.Publish(ctx, []txbox.Message{{ID: "x", Topic: "t", Payload: []byte("x")}, {ID: "y", Topic: "t", Payload: []byte("y")}})
	if len(errs) != 2 {
		t.Fatalf("%v, want two errors", errs)
	}
	for _, err := range errs {
		if err == nil || txbox.IsRejected(err) {
			t.Errorf("%v, want a transient error", err)
		}
	}
}

// Err drops the ids of an Outbox.Add or AddNoTx call and keeps its error:
// testenv.Must(t, testenv.Err(ob.Add(ctx, tx, msgs...)), "add").
func Err[T any](_ T, err error) error { return err }
