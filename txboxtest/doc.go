// Package txboxtest is what a txbox user's own tests need: assertions on
// the messages a transaction added to the outbox, an in-memory broker that
// the real relay publishes to and the real consumer receives from, and
// synchronous helpers that drain a relay or deliver one message to a
// handler, each bounded by an inactivity timeout instead of a fixed sleep.
//
// The shapes are River's rivertest (RequireInsertedTx, RequireManyInserted),
// MassTransit's test harness (waits bounded by an inactivity timeout) and
// Watermill's in-memory gochannel.
//
// Assertions read the outbox through the Outbox and, for the Tx variants,
// through the caller's transaction, so they see its uncommitted rows:
//
//	ids, _ := ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: "c-7", Payload: body})
//	rec := txboxtest.RequireAddedTx(ctx, t, ob, tx, &txboxtest.RequireAddedOpts{Topic: "order.placed", Key: "c-7"})
//
// The in-memory Broker routes what it is given to named bindings by topic
// pattern, dedupes by message id, redelivers on Retry, keeps dead letters
// and per-key order:
//
//	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
//	b.Bind("billing", "order.>")
//	r, _ := relay.New(ob, b, relay.Config{})
//	n := txboxtest.DrainRelay(ctx, t, r, nil)  // every deliverable row, published
//	c, _ := consumer.New(drv, consumer.Config{Broker: b}) // drv: the driver ob was built on
//	c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: "billing"}, handle)
//	res := txboxtest.Deliver(ctx, t, b, c, "billing", msg, nil) // res.Outcome == txboxtest.Acked
//
// The package imports only txbox's core packages, testing and the standard
// library. docs/guide/testing.md walks through it.
package txboxtest
