package txboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// exampleOutbox opens a migrated SQLite database in a temporary directory;
// the returned function removes it.
func exampleOutbox() (*sql.DB, *txbox.Outbox[*sql.Tx], func()) {
	dir, _ := os.MkdirTemp("", "txboxtest-example")
	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN(filepath.Join(dir, "shop.db")))
	if err != nil {
		log.Fatal(err)
	}
	drv := txboxsql.New(db, txboxdriver.SQLite)
	m, _ := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{consumer.DefaultInboxTable}})
	if _, err := m.Up(context.Background()); err != nil {
		log.Fatal(err)
	}
	ob, err := txbox.New(drv, txbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	return db, ob, func() { _ = db.Close(); _ = os.RemoveAll(dir) }
}

// exampleTB stands for the *testing.T of a test: it stops the example on
// a failure.
type exampleTB struct{}

func (exampleTB) Helper()                        {}
func (exampleTB) Cleanup(func())                 {}
func (exampleTB) Errorf(format string, a ...any) { log.Fatalf(format, a...) }
func (exampleTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }

var t exampleTB

// Check, inside the transaction that placed an order, that it added the
// order's event: RequireAddedTx sees the transaction's uncommitted rows
// and returns the one message that matches.
func ExampleRequireAddedTx() {
	db, ob, done := exampleOutbox()
	defer done()
	ctx := context.Background()

	tx, _ := db.BeginTx(ctx, nil)
	defer tx.Rollback()
	_, _ = ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: "customer-7", Payload: []byte(`{"order":1}`)})

	rec := txboxtest.RequireAddedTx(ctx, t, ob, tx, &txboxtest.RequireAddedOpts{Topic: "order.placed", Key: "customer-7"})
	fmt.Println(rec.Topic, string(rec.Payload))
	txboxtest.RequireNotAddedTx(ctx, t, ob, tx, &txboxtest.RequireAddedOpts{Topic: "order.cancelled"})
	// Output: order.placed {"order":1}
}

// Run the real relay against the in-memory broker: DrainRelay publishes
// every deliverable row and returns once a round finds none.
func ExampleDrainRelay() {
	_, ob, done := exampleOutbox()
	defer done()
	ctx := context.Background()
	_, _ = ob.AddNoTx(ctx,
		txbox.Message{ID: "1", Topic: "order.placed", Key: "customer-7", Payload: []byte("placed")},
		txbox.Message{ID: "2", Topic: "order.paid", Key: "customer-7", Payload: []byte("paid")})

	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	r, _ := relay.New(ob, b, relay.Config{Logger: slog.New(slog.DiscardHandler)})
	n := txboxtest.DrainRelay(ctx, t, r, nil)

	fmt.Println("published:", n)
	for _, m := range b.Published("") {
		fmt.Println(m.ID, m.Topic, string(m.Payload))
	}
	// Output:
	// published: 2
	// 1 order.placed placed
	// 2 order.paid paid
}

// Deliver one message to a consumer's inbox handler and see what became
// of it; delivered again, the inbox drops it as a duplicate.
func ExampleDeliver() {
	_, ob, done := exampleOutbox()
	defer done()
	ctx := context.Background()

	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	b.Bind("billing", "order.*")
	c, _ := consumer.New(ob, consumer.Config{Broker: b, Logger: slog.New(slog.DiscardHandler)})
	_ = c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: "billing"},
		func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
			if len(msg.Payload) == 0 {
				return consumer.Permanent(errors.New("empty order"))
			}
			_, err := ob.Add(ctx, tx, txbox.Message{Topic: "invoice.created", Payload: msg.Payload})
			return err
		})
	defer c.Stop(ctx)

	msg := txbox.Message{ID: "order-1", Topic: "order.placed", Payload: []byte(`{"order":1}`)}
	fmt.Println(txboxtest.Deliver(ctx, t, b, c, "billing", msg, nil).Outcome)
	fmt.Println(txboxtest.Deliver(ctx, t, b, c, "billing", msg, nil).Outcome)
	bad := txbox.Message{ID: "order-2", Topic: "order.placed"}
	fmt.Println(txboxtest.Deliver(ctx, t, b, c, "billing", bad, nil).Outcome)
	txboxtest.RequireAdded(ctx, t, ob, &txboxtest.RequireAddedOpts{Topic: "invoice.created"})
	fmt.Println(b.DeadLetters()[0].Message.ID, b.DeadLetters()[0].Cause)
	// Output:
	// acked
	// duplicate
	// dead-lettered
	// order-2 txbox/inbox: handler of billing message "order-2": permanent: empty order
}

// Run the relay and the consumer together, with no broker: the relay
// publishes to the Broker, the consumer receives from it, and WaitIdle
// returns once every routed message is settled.
func ExampleBroker() {
	_, ob, done := exampleOutbox()
	defer done()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)

	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	b.Bind("shipping", "order.>")
	c, _ := consumer.New(ob, consumer.Config{Broker: b, Logger: quiet})
	var shipped []string
	_ = c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "shipping", Binding: "shipping"},
		func(ctx context.Context, msg consumer.Message) error {
			shipped = append(shipped, string(msg.Payload)) // one key: one at a time, in order
			return nil
		})
	_ = c.Start(ctx)
	defer c.Stop(ctx)

	_, _ = ob.AddNoTx(ctx,
		txbox.Message{Topic: "order.placed.eu", Key: "o-1", Payload: []byte("pack")},
		txbox.Message{Topic: "order.paid.eu", Key: "o-1", Payload: []byte("ship")})
	r, _ := relay.New(ob, b, relay.Config{Logger: quiet})
	txboxtest.DrainRelay(ctx, t, r, nil)
	if err := b.WaitIdle(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(shipped)
	// Output: [pack ship]
}
