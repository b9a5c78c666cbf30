// Package consumer runs message handlers against a broker: each registered
// handler has an explicit, stable name, a binding on the broker (a
// JetStream durable consumer, a RabbitMQ queue), a delivery guarantee, and
// a function.
//
// An Inbox handler runs inside the transactional inbox (package inbox): the
// consumer begins a transaction, records the receipt of (handler name,
// message id), runs the handler with the transaction — its business writes
// and any outbox messages it adds with txbox.Outbox.Add commit together with
// the receipt — commits, and only then ACKs. A redelivered copy finds the
// receipt and is ACKed without running the handler, so the handler's
// database effects happen exactly once. An AtLeastOnce handler gets no
// transaction: it runs once per delivery and is ACKed after it returns.
//
//	c, err := consumer.New(txboxpgx.New(pool), consumer.Config{Broker: sub})
//	c.HandleInbox(consumer.HandlerConfig{Name: "billing.order-created", Binding: "ORDERS/billing"},
//		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
//			_, err := tx.Exec(ctx, "INSERT INTO invoices …")
//			return err
//		})
//	if err := c.Start(ctx); err != nil { … } // lists every problem found
//	defer c.Stop(ctx)
//
// By default an Inbox handler's deliveries share transactions: up to
// BatchConfig.Size of them in one, each handler under its own savepoint, one
// commit, then the ACKs together (see BatchConfig; Size 1 turns it off). A
// failing handler is rolled back alone; a transaction that fails as a
// whole is handled again one message at a time.
//
// A delivery that failed for the message's own reasons (the handler's
// error or panic, a commit the database refused for the message's data:
// txboxdriver.IsRejectedFor) is retried with backoff and dead-lettered after
// Config.MaxDeliveries. One that failed because the database did (a lost
// connection, a shutdown: txboxdriver.IsTransientFor, looking through the
// handler's wrapping) is never dead-lettered, does not count, and is
// retried as soon as the database answers again; a deadlock runs again at
// once.
//
// Several handlers can share one binding, each claiming its kind of message
// by topic, version header and content type (HandlerConfig.Route); a
// delivery no route claims follows the binding's Unrouted policy. While a
// delivery is unsettled its broker's ack deadline is extended where the
// broker allows it (txbox.DeadlineExtender). HandleInboxJSON and
// HandleAtLeastOnceJSON decode JSON payloads into a type.
//
// An Ordered handler (HandlerConfig.Ordered) runs the messages of one key
// one at a time in arrival order, different keys in parallel; a failed
// message is retried in process, holding back only its key, and a dead
// letter parks its key (ParkedKeys, ReleaseKey) unless DeadKey is
// ContinueKey. docs/guide/ordering.md has the rule to know: one consumer process
// per ordered binding.
//
// The broker side is the small Subscriber interface; implementations are
// natsjs.Subscriber (JetStream) and txboxrabbitmq.Subscriber. This package
// imports no broker SDK. docs/guide/consumer.md states the flow, the guarantee,
// its duplicate windows, dead letters and startup validation.
package consumer
