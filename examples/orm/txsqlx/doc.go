// Package txsqlx shows txbox with sqlx; it needs no helper, because a
// *sqlx.Tx embeds the *sql.Tx that txbox works on (txboxsql).
//
// The business write and the event in one sqlx transaction: pass tx.Tx to
// Outbox.Add.
//
//	tx, err := db.BeginTxx(ctx, nil)
//	…
//	defer tx.Rollback()
//	if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id, customer, total) VALUES (:id, :customer, :total)`, order); err != nil {
//		return err
//	}
//	if _, err := ob.Add(ctx, tx.Tx, txbox.Message{Topic: "order.placed", Key: order.Customer, Payload: body}); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// An inbox handler gets the *sql.Tx the consumer began. sqlx cannot wrap a
// *sql.Tx it did not begin (a *sqlx.Tx's driver name is unexported), so bind
// the query with the *sqlx.DB and run it on the *sql.Tx:
//
//	func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
//		query, args, err := db.BindNamed(`INSERT INTO orders (id, customer, total) VALUES (:id, :customer, :total)`, order)
//		if err != nil {
//			return err
//		}
//		_, err = tx.ExecContext(ctx, query, args...)
//		return err
//	}
//
// Or let sqlx own the transaction and record the message's receipt in it
// with inbox.RecordReceive and inbox.MarkProcessed (Example_recordReceive).
//
// The examples of this package run against PostgreSQL, SQLite and MySQL.
package txsqlx
