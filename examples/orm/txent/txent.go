// Package txent joins ent's generated client to txbox's outbox and inbox.
//
// txbox works on a *sql.Tx (txboxsql), and an *ent.Tx does not give its
// *sql.Tx out. So turn it round: begin the *sql.Tx, and run ent in it with
// Client, which wraps it in ent's database/sql driver (entgo.io/ent/dialect/sql).
// InTx does that for a function, and commits or rolls back:
//
//	err := txent.InTx(ctx, db, txboxdriver.Postgres, func(ctx context.Context, client *ent.Client, tx *sql.Tx) error {
//		if _, err := client.Order.Create().SetID("o-1").SetCustomer("c-7").SetTotal(1200).Save(ctx); err != nil {
//			return err
//		}
//		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: "c-7", Payload: body})
//		return err
//	})
//
// An inbox handler gets the *sql.Tx the consumer began: Client(tx, dialect)
// is its ent client.
//
// The generated code is in ./ent (one entity, Order, on the orders table);
// regenerate it with `go generate ./txent/ent` from the module's directory.
// The examples of this package run against PostgreSQL, SQLite and MySQL.
package txent

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/txbox/txbox/txboxdriver"

	"github.com/txbox/txbox/examples/orm/txent/ent"
)

// Client returns an ent client whose queries run in tx, a transaction on a
// database of dialect d. Committing or rolling back tx is its owner's
// business: the client's Tx and Close must not be called (Tx fails).
func Client(tx *sql.Tx, d txboxdriver.Dialect) (*ent.Client, error) {
	name, err := entDialect(d)
	if err != nil {
		return nil, err
	}
	return ent.NewClient(ent.Driver(entsql.NewDriver(name, entsql.Conn{ExecQuerier: tx}))), nil
}

// InTx begins a transaction on db, a database of dialect d, runs fn with
// an ent client in it (Client) and the *sql.Tx itself for Outbox.Add, and
// commits if fn returns nil; otherwise it rolls back and returns fn's
// error.
func InTx(ctx context.Context, db *sql.DB, d txboxdriver.Dialect, fn func(ctx context.Context, client *ent.Client, tx *sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	client, err := Client(tx, d)
	if err != nil {
		return err
	}
	if err := fn(ctx, client, tx); err != nil {
		return err
	}
	return tx.Commit()
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

func entDialect(d txboxdriver.Dialect) (string, error) {
	switch d {
	case txboxdriver.Postgres:
		return dialect.Postgres, nil
	case txboxdriver.SQLite:
		return dialect.SQLite, nil
	case txboxdriver.MySQL:
		return dialect.MySQL, nil
	}
	return "", fmt.Errorf("txent: no ent dialect for %q", d)
}
