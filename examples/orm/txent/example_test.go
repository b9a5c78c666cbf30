package txent_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxtest"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
	"github.com/txbox/txbox/examples/orm/txent"
	"github.com/txbox/txbox/examples/orm/txent/ent"
)

// placeOrder writes the order and its event in one transaction, through
// the generated ent client; then runs last, inside it, and its error rolls
// both back.
func placeOrder(ctx context.Context, db *sql.DB, d txboxdriver.Dialect, ob *txbox.Outbox[*sql.Tx], c shop.Checkout, then func(*sql.Tx) error) error {
	return txent.InTx(ctx, db, d, func(ctx context.Context, client *ent.Client, tx *sql.Tx) error {
		if _, err := client.Order.Create().SetID(c.OrderID).SetCustomer(c.Customer).SetTotal(c.Total).Save(ctx); err != nil {
			return err
		}
		if _, err := ob.Add(ctx, tx, shop.OrderPlaced(c.OrderID, c.Customer)); err != nil {
			return err
		}
		return then(tx)
	})
}

// checkoutHandler is an inbox handler writing through ent in the
// transaction the consumer began, with the receipt of the message.
func checkoutHandler(d txboxdriver.Dialect, ob *txbox.Outbox[*sql.Tx]) func(context.Context, *sql.Tx, consumer.Message) error {
	return func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		c, err := shop.DecodeCheckout(msg.Payload)
		if err != nil {
			return consumer.Permanent(err)
		}
		client, err := txent.Client(tx, d)
		if err != nil {
			return err
		}
		if _, err := client.Order.Create().SetID(c.OrderID).SetCustomer(c.Customer).SetTotal(c.Total).Save(ctx); err != nil {
			return err
		}
		_, err = ob.Add(ctx, tx, shop.OrderPlaced(c.OrderID, c.Customer))
		return err
	}
}

// The order and its event in one transaction of the ent client:
// committed, both are there; rolled back, neither is.
func ExampleInTx() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()

	err := txent.InTx(ctx, env.DB, env.Dialect, func(ctx context.Context, client *ent.Client, tx *sql.Tx) error {
		if _, err := client.Order.Create().SetID("o-1").SetCustomer("c-7").SetTotal(1200).Save(ctx); err != nil {
			return err
		}
		_, err := env.Outbox.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: "c-7", Payload: []byte(`{"order_id":"o-1"}`)})
		return err
	})
	fmt.Println("committed:", err)

	err = txent.InTx(ctx, env.DB, env.Dialect, func(ctx context.Context, client *ent.Client, tx *sql.Tx) error {
		if _, err := client.Order.Create().SetID("o-2").SetCustomer("c-8").SetTotal(50).Save(ctx); err != nil {
			return err
		}
		if _, err := env.Outbox.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: "c-8", Payload: []byte(`{"order_id":"o-2"}`)}); err != nil {
			return err
		}
		return errors.New("payment declined")
	})
	fmt.Println("rolled back:", err)

	rec := txboxtest.RequireAdded(ctx, ormtest.ExampleTB, env.Outbox, &txboxtest.RequireAddedOpts{Topic: "order.placed"})
	client := ent.NewClient(ent.Driver(entDriver(env)))
	orders, err := client.Order.Query().Count(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", orders, "events:", rec.Key, string(rec.Payload))
	// Output:
	// committed: <nil>
	// rolled back: payment declined
	// orders: 1 events: c-7 {"order_id":"o-1"}
}

// An inbox handler writing through ent: the order, its event and the
// receipt of the message commit together; the same message delivered
// again is a duplicate, and writes nothing.
func ExampleClient() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()

	ormtest.ExampleDeliverTwice(env, shop.Checkout{OrderID: "o-3", Customer: "c-9", Total: 300}, checkoutHandler(env.Dialect, env.Outbox))

	o, err := ent.NewClient(ent.Driver(entDriver(env))).Order.Get(ctx, "o-3")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.ID, o.Customer, o.Total)
	// Output:
	// acked
	// duplicate
	// o-3 c-9 300
}
