package txbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// Write a business row and its event in one transaction: the event exists
// if and only if the order does.
func ExampleOutbox_Add() {
	dir, _ := os.MkdirTemp("", "txbox-example")
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
	_, _ = db.Exec("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
	outbox, err := txbox.New(drv, txbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	tx, _ := db.BeginTx(ctx, nil)
	_, _ = tx.Exec("INSERT INTO orders (id, item) VALUES (1, 'tea')")
	_, err = outbox.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: "customer-7", Payload: []byte(`{"order":1}`)})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	var topic, payload string
	_ = db.QueryRow("SELECT topic, payload FROM txbox_outbox").Scan(&topic, &payload)
	fmt.Println(topic, payload)
	// Output: order.placed {"order":1}
}
