package txent_test

import (
	"context"
	"database/sql"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
	"github.com/txbox/txbox/examples/orm/txent"
)

func TestMain(m *testing.M) { ormtest.Main(m) }

// entDriver is ent's driver on env's pool, for reading back outside a
// transaction.
func entDriver(env ormtest.Env) *entsql.Driver {
	names := map[txboxdriver.Dialect]string{txboxdriver.Postgres: dialect.Postgres, txboxdriver.SQLite: dialect.SQLite, txboxdriver.MySQL: dialect.MySQL}
	return entsql.OpenDB(names[env.Dialect], env.DB)
}

func TestEnt(t *testing.T) {
	ormtest.Run(t, ormtest.All, ormtest.ORM{
		Place: func(ctx context.Context, env ormtest.Env, c shop.Checkout, then func(*sql.Tx) error) error {
			return placeOrder(ctx, env.DB, env.Dialect, env.Outbox, c, then)
		},
		Handler: func(env ormtest.Env) func(context.Context, *sql.Tx, consumer.Message) error {
			return checkoutHandler(env.Dialect, env.Outbox)
		},
	})
}

// The client from Client runs in the transaction it was given: what it
// wrote is gone once that transaction rolls back.
func TestClientRunsInTx(t *testing.T) {
	ormtest.Each(t, ormtest.All, func(t *testing.T, env ormtest.Env) {
		ctx := context.Background()
		tx, err := env.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		client, err := txent.Client(tx, env.Dialect)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Order.Create().SetID("o-1").SetCustomer("c").SetTotal(1).Save(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := client.Order.Query().Count(ctx); err != nil || n != 1 {
			t.Fatalf("orders in the transaction: %d, %v; want 1", n, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n := ormtest.Orders(t, env.DB); n != 0 {
			t.Fatalf("orders after the rollback: %d, want 0", n)
		}
	})
}

func TestClientUnknownDialect(t *testing.T) {
	if _, err := txent.Client(nil, txboxdriver.Dialect("oracle")); err == nil {
		t.Fatal("Client on an unknown dialect: no error")
	}
}
