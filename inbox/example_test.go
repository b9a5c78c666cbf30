package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// Handle a received message exactly once: the receipt of (source, id)
// commits with the handler's effects, and a second copy of the message is
// a Duplicate whose handler does not run. ACK the broker's message after
// Handle returned Fresh or Duplicate.
func ExampleInbox_Handle() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN("shop.db")) // with modernc.org/sqlite imported
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	drv := txboxsql.New(db, txboxdriver.SQLite)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{"orders_inbox"}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(drv, inbox.Config{Table: "orders_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // the broker delivers the message twice
		res, err := ib.Handle(ctx, "nats:orders", "order-1", nil, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE stock SET n = n - 1 WHERE sku = ?", "sku-9")
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res) // Fresh, then Duplicate
	}
}
