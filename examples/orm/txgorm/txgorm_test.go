package txgorm_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
	"github.com/txbox/txbox/examples/orm/txgorm"
)

func TestMain(m *testing.M) { ormtest.Main(m) }

// GORM on SQLite needs a cgo driver (gorm.io/driver/sqlite) or
// glebarez/sqlite, which registers the database/sql name "sqlite" that
// modernc.org/sqlite, the engine of txbox's tests, holds already.
var dialects = []txboxdriver.Dialect{txboxdriver.Postgres, txboxdriver.MySQL}

func TestGORM(t *testing.T) {
	ormtest.Run(t, dialects, ormtest.ORM{
		Place: func(ctx context.Context, env ormtest.Env, c shop.Checkout, then func(*sql.Tx) error) error {
			return placeOrder(ctx, open(env.DB, env.Dialect), env.Outbox, Order{ID: c.OrderID, Customer: c.Customer, Total: c.Total}, then)
		},
		Handler: func(env ormtest.Env) func(context.Context, *sql.Tx, consumer.Message) error {
			return checkoutHandler(open(env.DB, env.Dialect), env.Outbox)
		},
	})
}

// SQLTx refuses a *gorm.DB outside a transaction rather than return nil.
func TestSQLTxOutsideTransaction(t *testing.T) {
	env := ormtest.Open(t, txboxdriver.Postgres)
	if tx, err := txgorm.SQLTx(open(env.DB, env.Dialect)); err == nil {
		t.Fatalf("SQLTx outside a transaction: %v, want an error", tx)
	}
}

// WithTx leaves the *gorm.DB it was given on its pool: a write through it
// after the handler's transaction rolled back is its own, and stays.
func TestWithTxLeavesDBAlone(t *testing.T) {
	env := ormtest.Open(t, txboxdriver.Postgres)
	ctx := context.Background()
	db := open(env.DB, env.Dialect)
	tx, err := env.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := txgorm.WithTx(ctx, db, tx).Create(&Order{ID: "in-tx", Customer: "c", Total: 1}).Error; err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.Create(&Order{ID: "on-pool", Customer: "c", Total: 1}).Error; err != nil {
		t.Fatalf("db after WithTx: %v", err)
	}
	if got := ormtest.Count(t, env.DB, "SELECT COUNT(*) FROM orders"); got != 1 {
		t.Fatalf("orders: %d, want 1 (on-pool only)", got)
	}
}
