package drivertest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// Every driver txbox ships passes the conformance suite.

func TestPgx(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) txboxdriver.Driver[pgx.Tx] {
		pool, _ := testenv.Postgres(t, 16)
		return txboxpgx.New(pool)
	})
}

func TestSQLPostgres(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) txboxdriver.Driver[*sql.Tx] {
		db, _ := testenv.PostgresDB(t, 16)
		return txboxsql.New(db, txboxdriver.Postgres)
	})
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) txboxdriver.Driver[*sql.Tx] {
		return txboxsql.New(testenv.SQLite(t), txboxdriver.SQLite)
	})
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) txboxdriver.Driver[*sql.Tx] {
		return txboxsql.New(testenv.MySQL(t), txboxdriver.MySQL)
	})
}

// With clientFoundRows=true, MySQL reports a row matched but unchanged as
// affected: the suite passes under that setting too.
func TestMySQLClientFoundRows(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) txboxdriver.Driver[*sql.Tx] {
		return txboxsql.New(testenv.MySQL(t, "clientFoundRows=true"), txboxdriver.MySQL)
	})
}

// Through pgx's simple protocol (what a PgBouncer of before 1.21 in
// transaction mode needs), statements sent at once go as one query string.
func TestPgxSimpleProtocol(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) txboxdriver.Driver[pgx.Tx] {
		_, schema := testenv.Postgres(t, 1)
		cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
		testenv.Must(t, err, "parse config")
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		cfg.MaxConns = 16
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		testenv.Must(t, err, "pool")
		t.Cleanup(func() { testenv.ClosePool(t, pool) })
		return txboxpgx.New(pool)
	})
}
