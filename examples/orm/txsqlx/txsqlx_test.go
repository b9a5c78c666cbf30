package txsqlx_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/txboxsql"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
)

func TestMain(m *testing.M) { ormtest.Main(m) }

func TestSqlx(t *testing.T) {
	ormtest.Run(t, ormtest.All, ormtest.ORM{
		Place: func(ctx context.Context, env ormtest.Env, c shop.Checkout, then func(*sql.Tx) error) error {
			return placeOrder(ctx, open(env.DB, env.Dialect), env.Outbox, Order{ID: c.OrderID, Customer: c.Customer, Total: c.Total}, then)
		},
		Handler: func(env ormtest.Env) func(context.Context, *sql.Tx, consumer.Message) error {
			return checkoutHandler(open(env.DB, env.Dialect), env.Outbox)
		},
	})
}

// The inbox in sqlx's own transaction: a message applied once, its
// redelivery reported and not applied, and a failed application (the
// order exists already) leaves no receipt, so a redelivery tries again.
func TestSqlxRecordReceive(t *testing.T) {
	ormtest.Each(t, ormtest.All, func(t *testing.T, env ormtest.Env) {
		ctx := context.Background()
		db := open(env.DB, env.Dialect)
		ib, err := inbox.New(txboxsql.New(env.DB, env.Dialect), inbox.Config{Table: consumer.DefaultInboxTable, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		c := shop.Checkout{OrderID: "o-1", Customer: "c-1", Total: 10}
		for i, want := range []bool{true, false} {
			fresh, err := handleInSqlxTx(ctx, db, ib, shop.CheckoutMessage("m-1", c))
			if err != nil || fresh != want {
				t.Fatalf("delivery %d: fresh %v, %v; want %v, nil", i+1, fresh, err, want)
			}
		}
		if _, err := handleInSqlxTx(ctx, db, ib, shop.CheckoutMessage("m-2", c)); err == nil {
			t.Fatal("m-2, for an order that exists: no error")
		}
		if n := ormtest.Count(t, env.DB, "SELECT COUNT(*) FROM "+consumer.DefaultInboxTable); n != 1 {
			t.Fatalf("receipts: %d, want 1 (m-1; m-2's rolled back)", n)
		}
		if n := ormtest.Orders(t, env.DB); n != 1 {
			t.Fatalf("orders: %d, want 1", n)
		}
	})
}
