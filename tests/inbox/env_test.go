package inbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// env is one database behind one driver, with an inbox table and a business
// table "counter" (id text primary key, n integer) of its own.
type env[TTx any] struct {
	drv   txboxdriver.Driver[TTx]
	table string // the inbox table
}

// onEach runs a test on PostgreSQL through pgx, on PostgreSQL through
// database/sql and on SQLite, in parallel. conns bounds each pool.
func onEach(t *testing.T, conns int, pgxTest func(*testing.T, *env[pgx.Tx]), sqlTest func(*testing.T, *env[*sql.Tx])) {
	t.Helper()
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		pool, _ := testenv.Postgres(t, conns)
		pgxTest(t, setup(t, txboxpgx.New(pool)))
	})
	t.Run("sql-postgres", func(t *testing.T) {
		t.Parallel()
		db, _ := testenv.PostgresDB(t, conns)
		sqlTest(t, setup(t, txboxsql.New(db, txboxdriver.Postgres)))
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		db := testenv.SQLite(t)
		db.SetMaxOpenConns(conns)
		sqlTest(t, setup(t, txboxsql.New(db, txboxdriver.SQLite)))
	})
}

func setup[TTx any](t testing.TB, drv txboxdriver.Driver[TTx]) *env[TTx] {
	t.Helper()
	ctx := context.Background()
	e := &env[TTx]{drv: drv, table: testenv.Name("inbox")}
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{NoOutbox: true, InboxTables: []string{e.table}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	_, err = drv.Pool().Exec(ctx, "CREATE TABLE counter (id text PRIMARY KEY, n integer NOT NULL)")
	testenv.Must(t, err, "create counter")
	return e
}

func (e *env[TTx]) newInbox(t testing.TB, cfg inbox.Config) *inbox.Inbox[TTx] {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = e.table
	}
	ib, err := inbox.New(e.drv, cfg)
	testenv.Must(t, err, "inbox.New")
	return ib
}

// ph returns the dialect's n-th placeholder.
func (e *env[TTx]) ph(n int) string {
	if e.drv.Dialect() == txboxdriver.Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?" + strconv.Itoa(n)
}

// bump is the business write: counter[id] += 1, in tx.
func (e *env[TTx]) bump(ctx context.Context, tx TTx, id string) error {
	_, err := e.drv.UnwrapTx(tx).Exec(ctx,
		"INSERT INTO counter (id, n) VALUES ("+e.ph(1)+", 1) ON CONFLICT (id) DO UPDATE SET n = counter.n + 1", id)
	return err
}

// count runs a query returning one integer.
func (e *env[TTx]) count(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	rows, err := e.drv.Pool().Query(context.Background(), query, args...)
	testenv.Must(t, err, "query %s", query)
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("query %s: no row (err %v)", query, rows.Err())
	}
	var n int64
	testenv.Must(t, rows.Scan(&n), "scan %s", query)
	return n
}

func (e *env[TTx]) inboxRows(t testing.TB) int64 {
	return e.count(t, `SELECT count(*) FROM "`+e.table+`"`)
}

func (e *env[TTx]) counter(t testing.TB, id string) int64 {
	return e.count(t, "SELECT coalesce(sum(n), 0) FROM counter WHERE id = "+e.ph(1), id)
}

// exec runs a statement on the pool.
func (e *env[TTx]) exec(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	n, err := e.drv.Pool().Exec(context.Background(), query, args...)
	testenv.Must(t, err, "exec %s", query)
	return n
}

// events collects audit events.
type events struct {
	ch chan inbox.Event
}

func newEvents() *events { return &events{ch: make(chan inbox.Event, 1000)} }

func (ev *events) hook(_ context.Context, e inbox.Event) { ev.ch <- e }

func (ev *events) kinds() []inbox.EventKind {
	var out []inbox.EventKind
	for {
		select {
		case e := <-ev.ch:
			out = append(out, e.Kind)
		default:
			return out
		}
	}
}
