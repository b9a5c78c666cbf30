package outboxsql

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/migrate"
	"github.com/txbox/txbox/txboxsql"
)

// plainPool hides the TxBeginner of the pool it wraps, as a third-party
// driver without the capability would.
type plainPool struct{ p driver.Pool }

func (p plainPool) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return p.p.Exec(ctx, q, args...)
}
func (p plainPool) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	return p.p.Query(ctx, q, args...)
}
func (p plainPool) Begin(ctx context.Context) (driver.Tx, error) { return p.p.Begin(ctx) }

// On MySQL the claim transaction runs at READ COMMITTED, whether the pool
// can begin a transaction at a level (txboxsql) or not (the fallback).
func TestMySQLClaimReadCommitted(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	drv := txboxsql.New(db, driver.MySQL)
	ctx := context.Background()
	m, err := migrate.New(drv, migrate.Config{})
	testenv.Must(t, err, "migrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	row := Row{ID: "0190b5a0-0000-7000-8000-000000000001", Topic: "t", Payload: []byte("x"), Headers: "{}"}
	testenv.Must(t, NewInserter(driver.MySQL, "`txbox_outbox`").Insert(ctx, drv.Pool(), []Row{row}), "insert")

	for name, pool := range map[string]driver.Pool{"TxBeginner": drv.Pool(), "fallback": plainPool{drv.Pool()}} {
		if _, ok := pool.(driver.TxBeginner); ok != (name == "TxBeginner") {
			t.Fatalf("%s: TxBeginner %v", name, ok)
		}
		s, err := NewStore(driver.MySQL, pool, "`txbox_outbox`", time.Minute)
		testenv.Must(t, err, "NewStore")
		b, err := s.Claim(ctx, 10, 0)
		testenv.Must(t, err, "%s: claim", name)
		if len(b.Rows) != 1 {
			t.Fatalf("%s: claimed %d rows, want 1", name, len(b.Rows))
		}
		// The claim's FOR UPDATE has started the InnoDB transaction.
		rows, err := b.tx.Query(ctx, "SELECT trx_isolation_level FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()")
		testenv.Must(t, err, "%s: isolation", name)
		var level string
		if rows.Next() {
			testenv.Must(t, rows.Scan(&level), "scan")
		}
		testenv.Must(t, rows.Close(), "close")
		if level != "READ COMMITTED" {
			t.Errorf("%s: claim transaction at %q, want READ COMMITTED", name, level)
		}
		testenv.Must(t, b.Release(ctx), "%s: release", name)
	}
}
