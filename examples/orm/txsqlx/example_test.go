package txsqlx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"

	"github.com/jmoiron/sqlx"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"

	"github.com/txbox/txbox/examples/orm/internal/ormtest"
	"github.com/txbox/txbox/examples/orm/internal/shop"
)

// Order is a row of the orders table.
type Order struct {
	ID       string `db:"id"`
	Customer string `db:"customer"`
	Total    int64  `db:"total"`
}

const insertOrder = `INSERT INTO orders (id, customer, total) VALUES (:id, :customer, :total)`

// open returns sqlx on the caller's *sql.DB, with the driver name that
// picks the dialect's bind variables ($1 or ?).
func open(db *sql.DB, d txboxdriver.Dialect) *sqlx.DB {
	names := map[txboxdriver.Dialect]string{txboxdriver.Postgres: "pgx", txboxdriver.SQLite: "sqlite3", txboxdriver.MySQL: "mysql"}
	return sqlx.NewDb(db, names[d])
}

// placeOrder writes o and its event in one sqlx transaction; then runs
// last, inside it, and its error rolls both back.
func placeOrder(ctx context.Context, db *sqlx.DB, ob *txbox.Outbox[*sql.Tx], o Order, then func(*sql.Tx) error) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	if _, err := tx.NamedExecContext(ctx, insertOrder, o); err != nil {
		return err
	}
	if _, err := ob.Add(ctx, tx.Tx, shop.OrderPlaced(o.ID, o.Customer)); err != nil {
		return err
	}
	if err := then(tx.Tx); err != nil {
		return err
	}
	return tx.Commit()
}

// checkoutHandler is an inbox handler writing with sqlx's named binding in
// the transaction the consumer began, with the receipt of the message.
func checkoutHandler(db *sqlx.DB, ob *txbox.Outbox[*sql.Tx]) func(context.Context, *sql.Tx, consumer.Message) error {
	return func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		c, err := shop.DecodeCheckout(msg.Payload)
		if err != nil {
			return consumer.Permanent(err)
		}
		query, args, err := db.BindNamed(insertOrder, Order{ID: c.OrderID, Customer: c.Customer, Total: c.Total})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return err
		}
		_, err = ob.Add(ctx, tx, shop.OrderPlaced(c.OrderID, c.Customer))
		return err
	}
}

// The order and its event in one sqlx transaction: committed, both are
// there; rolled back, neither is.
func Example_transaction() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()
	db := open(env.DB, env.Dialect)

	place := func(o Order, fail error) error {
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.NamedExecContext(ctx, insertOrder, o); err != nil {
			return err
		}
		body := fmt.Appendf(nil, `{"order_id":%q}`, o.ID)
		if _, err := env.Outbox.Add(ctx, tx.Tx, txbox.Message{Topic: "order.placed", Key: o.Customer, Payload: body}); err != nil {
			return err
		}
		if fail != nil {
			return fail // the deferred Rollback takes the order and the event
		}
		return tx.Commit()
	}
	fmt.Println("committed:", place(Order{ID: "o-1", Customer: "c-7", Total: 1200}, nil))
	fmt.Println("rolled back:", place(Order{ID: "o-2", Customer: "c-8", Total: 50}, errors.New("payment declined")))

	rec := txboxtest.RequireAdded(ctx, ormtest.ExampleTB, env.Outbox, &txboxtest.RequireAddedOpts{Topic: "order.placed"})
	var orders int
	if err := db.GetContext(ctx, &orders, "SELECT COUNT(*) FROM orders"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", orders, "events:", rec.Key, string(rec.Payload))
	// Output:
	// committed: <nil>
	// rolled back: payment declined
	// orders: 1 events: c-7 {"order_id":"o-1"}
}

// An inbox handler writing with sqlx: the order, its event and the receipt
// of the message commit together; the same message delivered again is a
// duplicate, and writes nothing.
func Example_inbox() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()
	db := open(env.DB, env.Dialect)

	ormtest.ExampleDeliverTwice(env, shop.Checkout{OrderID: "o-3", Customer: "c-9", Total: 300}, checkoutHandler(db, env.Outbox))

	var o Order
	if err := db.GetContext(ctx, &o, db.Rebind("SELECT id, customer, total FROM orders WHERE id = ?"), "o-3"); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", o)
	// Output:
	// acked
	// duplicate
	// {ID:o-3 Customer:c-9 Total:300}
}

// handleInSqlxTx applies a checkout.completed message in a transaction that
// sqlx begins: the inbox records the receipt in it first, and a message
// received before is reported, not applied again.
func handleInSqlxTx(ctx context.Context, db *sqlx.DB, ib *inbox.Inbox[*sql.Tx], msg txbox.Message) (fresh bool, err error) {
	const source = "billing"
	c, err := shop.DecodeCheckout(msg.Payload)
	if err != nil {
		return false, err
	}
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	if fresh, err = ib.RecordReceive(ctx, tx.Tx, source, msg.ID, nil); err != nil || !fresh {
		return false, err
	}
	if _, err := tx.NamedExecContext(ctx, insertOrder, Order{ID: c.OrderID, Customer: c.Customer, Total: c.Total}); err != nil {
		return false, err
	}
	if err := ib.MarkProcessed(ctx, tx.Tx, source, msg.ID); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// The inbox in a transaction that sqlx owns: inbox.RecordReceive and
// MarkProcessed on tx.Tx, next to the sqlx writes.
func Example_recordReceive() {
	env, done := ormtest.ExamplePostgres()
	defer done()
	ctx := context.Background()
	db := open(env.DB, env.Dialect)
	ib, err := inbox.New(txboxsql.New(env.DB, env.Dialect), inbox.Config{Table: consumer.DefaultInboxTable, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}

	msg := shop.CheckoutMessage("checkout-1", shop.Checkout{OrderID: "o-4", Customer: "c-5", Total: 80})
	fmt.Println(handleInSqlxTx(ctx, db, ib, msg))
	fmt.Println(handleInSqlxTx(ctx, db, ib, msg))
	// Output:
	// true <nil>
	// false <nil>
}
