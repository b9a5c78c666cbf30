// Package txsqlc shows txbox with sqlc-generated code; it needs no helper,
// because the generated Queries run on any DBTX and WithTx takes the
// *sql.Tx that txbox works on (txboxsql).
//
//	tx, err := db.BeginTx(ctx, nil)
//	…
//	defer tx.Rollback()
//	if err := shopdb.New(db).WithTx(tx).CreateOrder(ctx, shopdb.CreateOrderParams{ID: "o-1", Customer: "c-7", Total: 1200}); err != nil {
//		return err
//	}
//	if _, err := ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: "c-7", Payload: body}); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// An inbox handler gets the *sql.Tx the consumer began: shopdb.New(tx).
//
// The generated code, committed, is sqlc v1.31.1's from schema.sql and
// queries/ (sqlc.yaml): shopdb for PostgreSQL, shopdblite for SQLite,
// shopdbmysql for MySQL, whose placeholders differ. The examples of this
// package run against PostgreSQL, its tests against all three.
package txsqlc

//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate
