package txsqlc_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxtest"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
	"github.com/txbox/txbox/examples/orm/txsqlc/shopdb"
)

// The order and its event in one transaction, the order written by
// sqlc's generated Queries: committed, both are there; rolled back,
// neither is.
func Example_transaction() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()
	queries := shopdb.New(env.DB)

	place := func(o shopdb.CreateOrderParams, fail error) error {
		tx, err := env.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := queries.WithTx(tx).CreateOrder(ctx, o); err != nil {
			return err
		}
		body := fmt.Appendf(nil, `{"order_id":%q}`, o.ID)
		if _, err := env.Outbox.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: o.Customer, Payload: body}); err != nil {
			return err
		}
		if fail != nil {
			return fail // the deferred Rollback takes the order and the event
		}
		return tx.Commit()
	}
	fmt.Println("committed:", place(shopdb.CreateOrderParams{ID: "o-1", Customer: "c-7", Total: 1200}, nil))
	fmt.Println("rolled back:", place(shopdb.CreateOrderParams{ID: "o-2", Customer: "c-8", Total: 50}, errors.New("payment declined")))

	rec := txboxtest.RequireAdded(ctx, ormtest.ExampleTB, env.Outbox, &txboxtest.RequireAddedOpts{Topic: "order.placed"})
	_, err := queries.GetOrder(ctx, "o-2")
	fmt.Println("o-2:", errors.Is(err, sql.ErrNoRows), "events:", rec.Key, string(rec.Payload))
	// Output:
	// committed: <nil>
	// rolled back: payment declined
	// o-2: true events: c-7 {"order_id":"o-1"}
}

// An inbox handler writing with sqlc's Queries on the consumer's
// transaction: the order, its event and the receipt of the message commit
// together; the same message delivered again is a duplicate.
func Example_inbox() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()

	handle := func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		c, err := shop.DecodeCheckout(msg.Payload)
		if err != nil {
			return consumer.Permanent(err)
		}
		if err := shopdb.New(tx).CreateOrder(ctx, shopdb.CreateOrderParams{ID: c.OrderID, Customer: c.Customer, Total: c.Total}); err != nil {
			return err
		}
		_, err = env.Outbox.Add(ctx, tx, shop.OrderPlaced(c.OrderID, c.Customer))
		return err
	}
	ormtest.ExampleDeliverTwice(env, shop.Checkout{OrderID: "o-3", Customer: "c-9", Total: 300}, handle)

	o, err := shopdb.New(env.DB).GetOrder(ctx, "o-3")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", o)
	// Output:
	// acked
	// duplicate
	// {ID:o-3 Customer:c-9 Total:300}
}
