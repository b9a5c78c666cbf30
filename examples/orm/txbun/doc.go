// Package txbun shows txbox with Bun; it needs no helper, because a bun.Tx
// embeds the *sql.Tx that txbox works on (txboxsql).
//
// The business write and the event in one Bun transaction: pass tx.Tx to
// Outbox.Add.
//
//	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		if _, err := tx.NewInsert().Model(&order).Exec(ctx); err != nil {
//			return err
//		}
//		_, err := ob.Add(ctx, tx.Tx, txbox.Message{Topic: "order.placed", Key: order.Customer, Payload: body})
//		return err
//	})
//
// An inbox handler gets the *sql.Tx the consumer began: run Bun's queries in
// it with Conn, which takes any bun.IConn.
//
//	func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
//		_, err := db.NewInsert().Conn(tx).Model(&order).Exec(ctx)
//		return err
//	}
//
// The examples of this package run against PostgreSQL, SQLite and MySQL.
package txbun
