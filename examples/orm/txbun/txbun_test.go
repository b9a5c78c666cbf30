package txbun_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/txbox/txbox/consumer"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
)

func TestMain(m *testing.M) { ormtest.Main(m) }

func TestBun(t *testing.T) {
	ormtest.Run(t, ormtest.All, ormtest.ORM{
		Place: func(ctx context.Context, env ormtest.Env, c shop.Checkout, then func(*sql.Tx) error) error {
			return placeOrder(ctx, open(env.DB, env.Dialect), env.Outbox, Order{ID: c.OrderID, Customer: c.Customer, Total: c.Total}, then)
		},
		Handler: func(env ormtest.Env) func(context.Context, *sql.Tx, consumer.Message) error {
			return checkoutHandler(open(env.DB, env.Dialect), env.Outbox)
		},
	})
}
