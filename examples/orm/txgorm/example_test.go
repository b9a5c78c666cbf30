package txgorm_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxtest"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
	"github.com/txbox/txbox/examples/orm/txgorm"
)

// Order is the GORM model of the orders table.
type Order struct {
	ID       string `gorm:"primaryKey;size:64"`
	Customer string `gorm:"size:64"`
	Total    int64
}

// open returns GORM on the caller's *sql.DB.
func open(db *sql.DB, d txboxdriver.Dialect) *gorm.DB {
	var dial gorm.Dialector
	switch d {
	case txboxdriver.Postgres:
		dial = postgres.New(postgres.Config{Conn: db})
	case txboxdriver.MySQL:
		dial = mysql.New(mysql.Config{Conn: db})
	default:
		log.Fatalf("no GORM dialector for %s here", d)
	}
	gdb, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	return gdb
}

// placeOrder writes o and its event in one GORM transaction; then runs
// last, inside it, and its error rolls both back.
func placeOrder(ctx context.Context, db *gorm.DB, ob *txbox.Outbox[*sql.Tx], o Order, then func(*sql.Tx) error) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&o).Error; err != nil {
			return err
		}
		if _, err := txgorm.Add(ctx, ob, tx, shop.OrderPlaced(o.ID, o.Customer)); err != nil {
			return err
		}
		sqlTx, err := txgorm.SQLTx(tx)
		if err != nil {
			return err
		}
		return then(sqlTx)
	})
}

// checkoutHandler is an inbox handler writing through GORM in the
// transaction the consumer began, with the receipt of the message.
func checkoutHandler(db *gorm.DB, ob *txbox.Outbox[*sql.Tx]) func(context.Context, *sql.Tx, consumer.Message) error {
	return func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		c, err := shop.DecodeCheckout(msg.Payload)
		if err != nil {
			return consumer.Permanent(err)
		}
		o := Order{ID: c.OrderID, Customer: c.Customer, Total: c.Total}
		if err := txgorm.WithTx(ctx, db, tx).Create(&o).Error; err != nil {
			return err
		}
		_, err = ob.Add(ctx, tx, shop.OrderPlaced(o.ID, o.Customer))
		return err
	}
}

// The order and its event in one GORM transaction: committed, both are
// there; rolled back, neither is.
func Example_transaction() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()
	db := open(env.DB, env.Dialect)

	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Order{ID: "o-1", Customer: "c-7", Total: 1200}).Error; err != nil {
			return err
		}
		_, err := txgorm.Add(ctx, env.Outbox, tx, txbox.Message{Topic: "order.placed", Key: "c-7", Payload: []byte(`{"order_id":"o-1"}`)})
		return err
	})
	fmt.Println("committed:", err)

	declined := errors.New("payment declined")
	err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Order{ID: "o-2", Customer: "c-8", Total: 50}).Error; err != nil {
			return err
		}
		if _, err := txgorm.Add(ctx, env.Outbox, tx, txbox.Message{Topic: "order.placed", Key: "c-8", Payload: []byte(`{"order_id":"o-2"}`)}); err != nil {
			return err
		}
		return declined
	})
	fmt.Println("rolled back:", err)

	rec := txboxtest.RequireAdded(ctx, ormtest.ExampleTB, env.Outbox, &txboxtest.RequireAddedOpts{Topic: "order.placed"})
	var orders int64
	db.Model(&Order{}).Count(&orders)
	fmt.Println("orders:", orders, "events:", rec.Key, string(rec.Payload))
	// Output:
	// committed: <nil>
	// rolled back: payment declined
	// orders: 1 events: c-7 {"order_id":"o-1"}
}

// An inbox handler writing through GORM: the order, its event and the
// receipt of the message commit together; the same message delivered
// again is a duplicate, and writes nothing.
func Example_inbox() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	db := open(env.DB, env.Dialect)

	ormtest.ExampleDeliverTwice(env, shop.Checkout{OrderID: "o-3", Customer: "c-9", Total: 300}, checkoutHandler(db, env.Outbox))

	var o Order
	db.First(&o, "id = ?", "o-3")
	fmt.Printf("%+v\n", o)
	// Output:
	// acked
	// duplicate
	// {ID:o-3 Customer:c-9 Total:300}
}
