package txbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// Place an order and its event in one transaction: both commit or neither
// does. The program imports an engine (here modernc.org/sqlite, registered
// as "sqlite"); txbox opens nothing and closes nothing.
func ExampleOutbox_Add() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN("shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	drv := txboxsql.New(db, txboxdriver.SQLite)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	ob, err := txbox.New(drv, txbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, customer) VALUES (?, ?)", 1, "c-7"); err != nil {
		log.Fatal(err)
	}
	ids, err := ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: "c-7", Payload: []byte(`{"order":1}`)})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("added", ids[0])
}

// A Publisher that finds a message the broker can never take returns the
// error wrapped by Reject: the relay dead-letters that message instead of
// retrying it, and keeps going.
func ExampleReject() {
	err := txbox.Reject(errors.New("subject too long"))
	fmt.Println(txbox.IsRejected(err), txbox.IsRejected(errors.New("connection reset")))
	// Output: true false
}
