package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// Apply each received order exactly once: the handler's writes and the
// message's inbox receipt commit in one transaction, so a redelivered copy
// finds the receipt and the handler does not run again. Events the handler
// adds to the outbox commit with them.
func ExampleConsumer_HandleInbox() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN("billing.db")) // with modernc.org/sqlite imported
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	drv := txboxsql.New(db, txboxdriver.SQLite)
	ob, err := txbox.New(drv, txbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	broker := txboxtest.NewBroker(txboxtest.BrokerConfig{}) // or natsjs.NewSubscriber, …
	broker.Bind("billing", "order.*")
	c, err := consumer.New(drv, consumer.Config{Broker: broker})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop(ctx)
	err = c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: "billing"},
		func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
			if len(msg.Payload) == 0 {
				return consumer.Permanent(errors.New("empty order")) // dead-lettered, not retried
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO invoices (order_id) VALUES (?)", msg.ID); err != nil {
				return err
			}
			_, err := ob.Add(ctx, tx, txbox.Message{Topic: "invoice.created", Payload: msg.Payload})
			return err
		})
	if err != nil {
		log.Fatal(err)
	}
}

// A handler's error is retried with backoff up to MaxDeliveries; wrapped by
// Permanent it dead-letters the message at once.
func ExamplePermanent() {
	err := fmt.Errorf("order 7: %w", consumer.Permanent(errors.New("unknown product")))
	fmt.Println(consumer.IsPermanent(err), consumer.IsPermanent(errors.New("timeout")))
	// Output: true false
}
