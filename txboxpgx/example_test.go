package txboxpgx_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxpgx"
)

// Use txbox on your pgx pool: the outbox's transactions are pgx.Tx, so an
// event commits with the business rows written through the same tx. It
// needs a PostgreSQL server with the outbox table (package txboxmigrate or
// `txbox migrate up`).
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = $1", 7); err != nil {
			return err
		}
		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "account.debited", Key: "7", Payload: []byte(`{"amount":10}`)})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
