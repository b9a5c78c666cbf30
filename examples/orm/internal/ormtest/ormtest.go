// Package ormtest sets up what the ORM examples and their tests share: a
// database of each dialect, isolated per test (through tests/testenv), with
// the outbox, the inbox and the orders table migrated, and a consumer on
// txboxtest's in-memory Broker.
package ormtest

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"

	"github.com/txbox/txbox/examples/orm/internal/shop"
)

// Binding is the Broker binding the examples' inbox handlers read.
const Binding = "checkout"

// Env is one migrated database.
type Env struct {
	Dialect txboxdriver.Dialect
	DB      *sql.DB
	Outbox  *txbox.Outbox[*sql.Tx]
}

// All is every dialect txboxsql speaks.
var All = []txboxdriver.Dialect{txboxdriver.Postgres, txboxdriver.SQLite, txboxdriver.MySQL}

// Each runs fn as a subtest per dialect, in parallel, each on a database of
// its own.
func Each(t *testing.T, dialects []txboxdriver.Dialect, fn func(t *testing.T, env Env)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, Open(t, d))
		})
	}
}

// Open returns a database of dialect d of t's own (a PostgreSQL schema, a
// SQLite file, a MySQL database), migrated. A service that is down skips t,
// or fails it under CI=true.
func Open(t testing.TB, d txboxdriver.Dialect) Env {
	t.Helper()
	var db *sql.DB
	switch d {
	case txboxdriver.Postgres:
		db, _ = testenv.PostgresDB(t, 4)
	case txboxdriver.SQLite:
		db = testenv.SQLite(t)
	case txboxdriver.MySQL:
		db = testenv.MySQL(t)
	default:
		t.Fatalf("dialect %q", d)
	}
	env, err := setUp(context.Background(), db, d)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func setUp(ctx context.Context, db *sql.DB, d txboxdriver.Dialect) (Env, error) {
	drv := txboxsql.New(db, d)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{consumer.DefaultInboxTable}})
	if err != nil {
		return Env{}, err
	}
	if _, err := m.Up(ctx); err != nil {
		return Env{}, fmt.Errorf("migrate: %w", err)
	}
	if _, err := db.ExecContext(ctx, shop.OrdersDDL); err != nil {
		return Env{}, fmt.Errorf("create orders: %w", err)
	}
	ob, err := txbox.New(drv, txbox.Config{})
	if err != nil {
		return Env{}, err
	}
	return Env{Dialect: d, DB: db, Outbox: ob}, nil
}

// Consumer returns a consumer on a new Broker, with handle as the inbox
// handler "billing" of Binding. A message whose handler fails is
// dead-lettered at once (MaxDeliveries 1), so that Deliver's outcome is
// final.
func Consumer(t txboxtest.TB, env Env, handle func(context.Context, *sql.Tx, consumer.Message) error) (*txboxtest.Broker, *consumer.Consumer[*sql.Tx]) {
	t.Helper()
	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	b.Bind(Binding, shop.TopicCheckoutCompleted)
	c, err := consumer.New(env.Outbox, consumer.Config{Broker: b, MaxDeliveries: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	if err := c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: Binding}, handle); err != nil {
		t.Fatalf("handler: %v", err)
	}
	return b, c
}

// Count returns the result of a SELECT COUNT(*) query.
func Count(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Orders counts the rows of the orders table.
func Orders(t testing.TB, db *sql.DB) int {
	t.Helper()
	return Count(t, db, "SELECT COUNT(*) FROM orders")
}

// ExamplePostgres is Open for a runnable example, which has no
// *testing.T: a PostgreSQL schema of its own (dropped by the returned
// function), migrated. It stops the program when PostgreSQL is down; Main
// keeps examples from running then, except under CI=true.
func ExamplePostgres() (Env, func()) {
	ctx := context.Background()
	admin, err := sql.Open("pgx", testenv.PostgresURL())
	if err != nil {
		log.Fatal(err)
	}
	schema := testenv.Name("orm")
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatalf("PostgreSQL (%s): %v", testenv.EnvPostgres, err)
	}
	cfg, err := pgx.ParseConfig(testenv.PostgresURL())
	if err != nil {
		log.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	done := func() {
		_ = db.Close()
		_, _ = admin.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close()
	}
	env, err := setUp(ctx, db, txboxdriver.Postgres)
	if err != nil {
		done()
		log.Fatal(err)
	}
	return env, done
}

// Main is the TestMain of every example package. The examples run on
// PostgreSQL and, having no *testing.T, cannot skip: when PostgreSQL is
// down, Main runs the tests only (they skip, as every txbox test does),
// except under CI=true, where the examples run and fail.
func Main(m *testing.M) {
	if os.Getenv("CI") != "true" {
		if err := ping(); err != nil {
			flag.Parse()
			if run := flag.Lookup("test.run"); run != nil && run.Value.String() == "" {
				fmt.Fprintf(os.Stderr, "PostgreSQL is unreachable (%v): examples not run\n", err)
				_ = run.Value.Set("^Test")
			}
		}
	}
	os.Exit(m.Run())
}

func ping() error {
	db, err := sql.Open("pgx", testenv.PostgresURL())
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(context.Background())
}

// ExampleTB stands for the *testing.T of a test in a runnable example: it
// stops the program on a failure, and runs no cleanup (the example defers
// its own).
var ExampleTB txboxtest.TB = exampleTB{}

type exampleTB struct{}

func (exampleTB) Helper()                        {}
func (exampleTB) Cleanup(func())                 {}
func (exampleTB) Errorf(format string, a ...any) { log.Fatalf(format, a...) }
func (exampleTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }

// ExampleDeliverTwice delivers one checkout.completed message of c, twice,
// to handle run as an inbox handler on a Broker, and prints each outcome:
// acked, then duplicate.
func ExampleDeliverTwice(env Env, c shop.Checkout, handle func(context.Context, *sql.Tx, consumer.Message) error) {
	ctx := context.Background()
	b, cons := Consumer(ExampleTB, env, handle)
	defer func() { _ = cons.Stop(ctx) }()
	msg := shop.CheckoutMessage("checkout-1", c)
	for range 2 {
		fmt.Println(txboxtest.Deliver(ctx, ExampleTB, b, cons, Binding, msg, nil).Outcome)
	}
}
