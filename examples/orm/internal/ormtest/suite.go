package ormtest

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxtest"

	"github.com/txbox/txbox/examples/orm/internal/shop"
)

// ORM is what an example package gives Run: its two recipes.
type ORM struct {
	// Place writes the order c and shop.OrderPlaced(c.OrderID, c.Customer)
	// in one transaction of the ORM, then calls then inside it with the
	// *sql.Tx that Add was given; then's error rolls the transaction back
	// and is returned.
	Place func(ctx context.Context, env Env, c shop.Checkout, then func(tx *sql.Tx) error) error
	// Handler returns the inbox handler of checkout.completed: it writes
	// the order through the ORM in the handler's transaction and adds its
	// order.placed event; a payload that does not decode is a
	// consumer.Permanent error.
	Handler func(env Env) func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error
}

var errDeclined = errors.New("payment declined")

// Run checks orm on each dialect:
//
//   - committed: the order and its event, added in the ORM's transaction,
//     are both there after the commit (and the event was visible to the
//     transaction before it);
//   - rolled-back: a transaction that fails after Add leaves neither;
//   - inbox: delivered, the handler's order and event commit with the
//     receipt; delivered again, it is a duplicate and nothing is written
//     twice; a handler failing after its ORM write (the order exists
//     already) leaves nothing of that delivery; a bad payload is
//     dead-lettered.
func Run(t *testing.T, dialects []txboxdriver.Dialect, orm ORM) {
	t.Helper()
	ctx := context.Background()
	Each(t, dialects, func(t *testing.T, env Env) {
		t.Run("committed", func(t *testing.T) {
			c := shop.Checkout{OrderID: "o-1", Customer: "c-7", Total: 1200}
			want := shop.OrderPlaced(c.OrderID, c.Customer)
			err := orm.Place(ctx, env, c, func(tx *sql.Tx) error {
				txboxtest.RequireAddedTx(ctx, t, env.Outbox, tx, &txboxtest.RequireAddedOpts{Topic: want.Topic, Key: want.Key, Payload: want.Payload})
				return nil
			})
			if err != nil {
				t.Fatalf("place: %v", err)
			}
			txboxtest.RequireAdded(ctx, t, env.Outbox, &txboxtest.RequireAddedOpts{Topic: want.Topic, Key: want.Key, Payload: want.Payload})
			if n := Count(t, env.DB, "SELECT COUNT(*) FROM orders WHERE id = 'o-1' AND customer = 'c-7' AND total = 1200"); n != 1 {
				t.Fatalf("order o-1: %d rows, want 1", n)
			}
		})
		t.Run("rolled-back", func(t *testing.T) {
			c := shop.Checkout{OrderID: "o-2", Customer: "c-8", Total: 50}
			err := orm.Place(ctx, env, c, func(tx *sql.Tx) error {
				txboxtest.RequireAddedTx(ctx, t, env.Outbox, tx, &txboxtest.RequireAddedOpts{Topic: shop.TopicOrderPlaced, Key: "c-8"})
				return errDeclined
			})
			if !errors.Is(err, errDeclined) {
				t.Fatalf("place: %v, want %v", err, errDeclined)
			}
			txboxtest.RequireNotAdded(ctx, t, env.Outbox, &txboxtest.RequireAddedOpts{Key: "c-8"})
			if n := Count(t, env.DB, "SELECT COUNT(*) FROM orders WHERE id = 'o-2'"); n != 0 {
				t.Fatalf("order o-2: %d rows after the rollback, want 0", n)
			}
		})
		t.Run("inbox", func(t *testing.T) {
			b, cons := Consumer(t, env, orm.Handler(env))
			c := shop.Checkout{OrderID: "o-3", Customer: "c-9", Total: 300}
			msg := shop.CheckoutMessage("checkout-1", c)
			if got := txboxtest.Deliver(ctx, t, b, cons, Binding, msg, nil).Outcome; got != txboxtest.Acked {
				t.Fatalf("first delivery: %v, want %v", got, txboxtest.Acked)
			}
			if got := txboxtest.Deliver(ctx, t, b, cons, Binding, msg, nil).Outcome; got != txboxtest.Duplicate {
				t.Fatalf("second delivery: %v, want %v", got, txboxtest.Duplicate)
			}
			// Another message for the same order: the ORM's insert fails on
			// the primary key, so its receipt and its event roll back too.
			again := shop.CheckoutMessage("checkout-2", c)
			if got := txboxtest.Deliver(ctx, t, b, cons, Binding, again, nil).Outcome; got != txboxtest.DeadLettered {
				t.Fatalf("conflicting delivery: %v, want %v", got, txboxtest.DeadLettered)
			}
			bad := txboxtest.Deliver(ctx, t, b, cons, Binding, shop.CheckoutMessage("checkout-3", shop.Checkout{Customer: "c-9"}), nil)
			if bad.Outcome != txboxtest.DeadLettered {
				t.Fatalf("bad payload: %v, want %v", bad.Outcome, txboxtest.DeadLettered)
			}
			if n := Count(t, env.DB, "SELECT COUNT(*) FROM orders WHERE customer = 'c-9'"); n != 1 {
				t.Fatalf("orders of c-9: %d, want 1", n)
			}
			want := shop.OrderPlaced(c.OrderID, c.Customer)
			txboxtest.RequireAdded(ctx, t, env.Outbox, &txboxtest.RequireAddedOpts{Topic: want.Topic, Key: want.Key, Payload: want.Payload}) // exactly one
			if n := Count(t, env.DB, "SELECT COUNT(*) FROM "+consumer.DefaultInboxTable); n != 1 {
				t.Fatalf("inbox receipts: %d, want 1 (checkout-1)", n)
			}
		})
	})
}
