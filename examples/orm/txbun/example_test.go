package txbun_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/schema"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxtest"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
)

// Order is the Bun model of the orders table.
type Order struct {
	bun.BaseModel `bun:"table:orders"`

	ID       string `bun:"id,pk"`
	Customer string `bun:"customer,notnull"`
	Total    int64  `bun:"total,notnull"`
}

// open returns Bun on the caller's *sql.DB.
func open(db *sql.DB, d txboxdriver.Dialect) *bun.DB {
	var dial schema.Dialect
	switch d {
	case txboxdriver.Postgres:
		dial = pgdialect.New()
	case txboxdriver.SQLite:
		dial = sqlitedialect.New()
	case txboxdriver.MySQL:
		dial = mysqldialect.New()
	default:
		log.Fatalf("no Bun dialect for %s here", d)
	}
	return bun.NewDB(db, dial)
}

// placeOrder writes o and its event in one Bun transaction; then runs
// last, inside it, and its error rolls both back.
func placeOrder(ctx context.Context, db *bun.DB, ob *txbox.Outbox[*sql.Tx], o Order, then func(*sql.Tx) error) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&o).Exec(ctx); err != nil {
			return err
		}
		if _, err := ob.Add(ctx, tx.Tx, shop.OrderPlaced(o.ID, o.Customer)); err != nil {
			return err
		}
		return then(tx.Tx)
	})
}

// checkoutHandler is an inbox handler writing through Bun in the
// transaction the consumer began, with the receipt of the message.
func checkoutHandler(db *bun.DB, ob *txbox.Outbox[*sql.Tx]) func(context.Context, *sql.Tx, consumer.Message) error {
	return func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		c, err := shop.DecodeCheckout(msg.Payload)
		if err != nil {
			return consumer.Permanent(err)
		}
		o := Order{ID: c.OrderID, Customer: c.Customer, Total: c.Total}
		if _, err := db.NewInsert().Conn(tx).Model(&o).Exec(ctx); err != nil {
			return err
		}
		_, err = ob.Add(ctx, tx, shop.OrderPlaced(o.ID, o.Customer))
		return err
	}
}

// The order and its event in one Bun transaction: committed, both are
// there; rolled back, neither is.
func Example_transaction() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()
	db := open(env.DB, env.Dialect)

	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&Order{ID: "o-1", Customer: "c-7", Total: 1200}).Exec(ctx); err != nil {
			return err
		}
		_, err := env.Outbox.Add(ctx, tx.Tx, txbox.Message{Topic: "order.placed", Key: "c-7", Payload: []byte(`{"order_id":"o-1"}`)})
		return err
	})
	fmt.Println("committed:", err)

	declined := errors.New("payment declined")
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&Order{ID: "o-2", Customer: "c-8", Total: 50}).Exec(ctx); err != nil {
			return err
		}
		if _, err := env.Outbox.Add(ctx, tx.Tx, txbox.Message{Topic: "order.placed", Key: "c-8", Payload: []byte(`{"order_id":"o-2"}`)}); err != nil {
			return err
		}
		return declined
	})
	fmt.Println("rolled back:", err)

	rec := txboxtest.RequireAdded(ctx, ormtest.ExampleTB, env.Outbox, &txboxtest.RequireAddedOpts{Topic: "order.placed"})
	orders, _ := db.NewSelect().Model((*Order)(nil)).Count(ctx)
	fmt.Println("orders:", orders, "events:", rec.Key, string(rec.Payload))
	// Output:
	// committed: <nil>
	// rolled back: payment declined
	// orders: 1 events: c-7 {"order_id":"o-1"}
}

// An inbox handler writing through Bun: the order, its event and the
// receipt of the message commit together; the same message delivered
// again is a duplicate, and writes nothing.
func Example_inbox() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()
	db := open(env.DB, env.Dialect)

	ormtest.ExampleDeliverTwice(env, shop.Checkout{OrderID: "o-3", Customer: "c-9", Total: 300}, checkoutHandler(db, env.Outbox))

	var o Order
	if err := db.NewSelect().Model(&o).Where("id = ?", "o-3").Scan(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s %d\n", o.ID, o.Customer, o.Total)
	// Output:
	// acked
	// duplicate
	// o-3 c-9 300
}
