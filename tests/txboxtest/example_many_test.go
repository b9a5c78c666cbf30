package txboxtest_test

import (
	"context"
	"fmt"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxtest"
)

// Check what a committed transaction left in the outbox: RequireManyAdded
// wants exactly these messages in the order the relay delivers them,
// RequireAdded exactly one match, and RequireNotAdded none.
func ExampleRequireManyAdded() {
	db, ob, done := exampleOutbox()
	defer done()
	ctx := context.Background()

	tx, _ := db.BeginTx(ctx, nil)
	_, _ = ob.Add(ctx, tx,
		txbox.Message{Topic: "order.placed", Key: "customer-7", Payload: []byte(`{"order":1}`)},
		txbox.Message{Topic: "order.paid", Key: "customer-7", Payload: []byte(`{"order":1}`)})
	_ = tx.Commit()

	recs := txboxtest.RequireManyAdded(ctx, t, ob, []txboxtest.RequireAddedOpts{
		{Topic: "order.placed", Key: "customer-7"},
		{Topic: "order.paid", Key: "customer-7"},
	})
	for _, r := range recs {
		fmt.Println(r.Topic, r.Key)
	}
	paid := txboxtest.RequireAdded(ctx, t, ob, &txboxtest.RequireAddedOpts{Topic: "order.paid"})
	fmt.Println(string(paid.Payload))
	txboxtest.RequireNotAdded(ctx, t, ob, &txboxtest.RequireAddedOpts{Topic: "order.cancelled"})
	// Output:
	// order.placed customer-7
	// order.paid customer-7
	// {"order":1}
}
