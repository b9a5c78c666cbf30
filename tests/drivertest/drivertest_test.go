package drivertest_test

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// Every driver txbox ships passes the conformance suite.

func TestPgx(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) driver.Driver[pgx.Tx] {
		pool, _ := testenv.Postgres(t, 16)
		return txboxpgx.New(pool)
	})
}

func TestSQLPostgres(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) driver.Driver[*sql.Tx] {
		db, _ := testenv.PostgresDB(t, 16)
		return txboxsql.New(db, driver.Postgres)
	})
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) driver.Driver[*sql.Tx] {
		return txboxsql.New(testenv.SQLite(t), driver.SQLite)
	})
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) driver.Driver[*sql.Tx] {
		return txboxsql.New(testenv.MySQL(t), driver.MySQL)
	})
}

// With clientFoundRows=true, MySQL reports a row matched but unchanged as
// affected: the suite passes under that setting too.
func TestMySQLClientFoundRows(t *testing.T) {
	t.Parallel()
	drivertest.Exercise(t, func(t *testing.T) driver.Driver[*sql.Tx] {
		return txboxsql.New(testenv.MySQL(t, "clientFoundRows=true"), driver.MySQL)
	})
}
