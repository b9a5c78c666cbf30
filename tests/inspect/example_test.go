package inspect_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inspect"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// Read the backlog of an outbox table, its undelivered rows and one row in
// full.
func Example() {
	dir, _ := os.MkdirTemp("", "txbox-inspect")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(dir, "shop.db")))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	drv := txboxsql.New(db, txboxdriver.SQLite)
	m, _ := txboxmigrate.New(drv, txboxmigrate.Config{})
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	outbox, _ := txbox.New(drv, txbox.Config{})
	tx, _ := db.BeginTx(ctx, nil)
	_, _ = outbox.Add(ctx, tx,
		txbox.Message{Topic: "order.placed", Key: "customer-7", Payload: []byte(`{"order":1}`)},
		txbox.Message{Topic: "order.placed", Key: "customer-8", Payload: []byte(`{"order":2}`)},
		txbox.Message{Topic: "invoice.sent", Payload: []byte(`{"invoice":9}`)},
	)
	_ = tx.Commit()

	in, err := inspect.New(drv, txbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	b, _ := in.Backlog(ctx)
	fmt.Printf("pending %d, retrying %d, parked %d, dead %d\n", b.Pending, b.Retrying, b.Parked, b.Dead)
	for _, t := range b.Topics {
		fmt.Println(t.Topic, t.Undelivered)
	}
	rows, _ := in.Pending(ctx, inspect.Filter{Topic: "order.placed"})
	for _, r := range rows {
		fmt.Println(r.Key, r.State, r.Attempts)
	}
	msg, _ := in.Show(ctx, rows[0].Seq)
	fmt.Println(string(msg.Payload))
	// Output:
	// pending 3, retrying 0, parked 0, dead 0
	// order.placed 2
	// invoice.sent 1
	// customer-7 pending 0
	// customer-8 pending 0
	// {"order":1}
}
