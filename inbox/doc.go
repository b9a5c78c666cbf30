// Package inbox is the transactional inbox: a consumer's handler applies its
// database effects exactly once per (source, message id), because the record
// of the message's receipt commits in the same transaction as those effects.
//
// A redelivered copy of a message (a broker's retry, a replay, a consumer
// restarted before its ACK) collides with the first copy's receipt on the
// table's primary key, and its handler does not run:
//
//	ib, err := inbox.New(txboxpgx.New(pool), inbox.Config{Table: "orders_inbox"})
//	…
//	res, err := ib.Handle(ctx, "nats:orders", msgID, nil, func(ctx context.Context, tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "INSERT INTO orders …"); err != nil {
//			return err
//		}
//		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "order.accepted", Payload: body})
//		return err
//	})
//	// ACK the broker message after Handle returned Fresh or Duplicate.
//
// The receipt is written insert-first — INSERT … ON CONFLICT DO NOTHING
// RETURNING, one round trip — never checked first and inserted after, which
// lets two concurrent copies both run. Handle opens and commits the
// transaction; RecordReceive and MarkProcessed serve callers that manage
// their own. Sweep ages receipts out after the retention, and Stats counts
// them per source.
//
// The table is created by migrations (package txboxmigrate, InboxTables; or
// `txbox migrate`), never at run time. docs/guide/inbox.md states the guarantee
// and what lies outside it.
package inbox
