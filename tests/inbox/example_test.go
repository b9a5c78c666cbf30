package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the program picks the SQLite engine

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// A consumer receives an order message, writes the order and emits an
// "order.accepted" event, all in one transaction with the inbox receipt.
// The broker redelivers the message: the handler does not run again.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "txbox-inbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(dir, "app.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	drv := txboxsql.New(db, txboxdriver.SQLite)

	// Once, at deploy time: the outbox, the inbox, the business table.
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{"orders_inbox"}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	ib, err := inbox.New(drv, inbox.Config{Table: "orders_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	ob, err := txbox.New(drv, txbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	// The handler of "order.placed" messages: consume → write → emit.
	handle := func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, amount) VALUES ('o-42', 1999)"); err != nil {
			return err
		}
		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "order.accepted", Key: "o-42", Payload: []byte(`{"order":"o-42"}`)})
		return err
	}

	// The broker delivers the same message twice.
	for range 2 {
		res, err := ib.Handle(ctx, "nats:orders.placed", "evt-9f3c4d", map[string]string{"subject": "orders.placed"}, handle)
		if err != nil {
			log.Fatal(err) // don't ACK: the broker redelivers, and the handler runs again
		}
		fmt.Println("handled:", res) // ACK the broker message now
	}

	var orders, events int
	_ = db.QueryRow("SELECT count(*) FROM orders").Scan(&orders)
	_ = db.QueryRow("SELECT count(*) FROM txbox_outbox").Scan(&events)
	fmt.Println("orders:", orders, "outbox messages:", events)

	stats, err := ib.Stats(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range stats {
		fmt.Printf("%s: total %d, processed %d, pending %d\n", s.Source, s.Total, s.Processed, s.Pending)
	}
	// Output:
	// handled: fresh
	// handled: duplicate
	// orders: 1 outbox messages: 1
	// nats:orders.placed: total 1, processed 1, pending 0
}
