// Package txgorm joins GORM's transactions to txbox's outbox and inbox.
//
// txbox works on the caller's *sql.Tx (txboxsql). Inside db.Transaction,
// GORM's *gorm.DB holds that *sql.Tx as its Statement.ConnPool: SQLTx takes
// it out, and Add passes it to Outbox.Add, so the business write and the
// event commit or roll back together:
//
//	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
//		if err := tx.Create(&order).Error; err != nil {
//			return err
//		}
//		_, err := txgorm.Add(ctx, ob, tx, txbox.Message{Topic: "order.placed", Key: order.Customer, Payload: body})
//		return err
//	})
//
// The other way round, an inbox handler gets the *sql.Tx the consumer began;
// WithTx returns a *gorm.DB whose queries run in it:
//
//	func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
//		return txgorm.WithTx(ctx, db, tx).Create(&order).Error
//	}
//
// The examples of this package run both against PostgreSQL and MySQL.
package txgorm

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"

	"github.com/txbox/txbox"
)

// SQLTx returns the *sql.Tx that tx runs in: tx is the *gorm.DB that
// db.Transaction hands its function (or that db.Begin returned), on a
// database/sql connection pool, with or without PrepareStmt. Outside a
// transaction, it returns an error.
func SQLTx(tx *gorm.DB) (*sql.Tx, error) {
	switch p := tx.Statement.ConnPool.(type) {
	case *sql.Tx:
		return p, nil
	case *gorm.PreparedStmtTX:
		if t, ok := p.Tx.(*sql.Tx); ok {
			return t, nil
		}
	}
	return nil, fmt.Errorf("txgorm: the *gorm.DB is not in a database/sql transaction (its connection pool is a %T)", tx.Statement.ConnPool)
}

// Add adds msgs to ob in tx's transaction (see SQLTx) and returns their ids,
// as Outbox.Add does.
func Add(ctx context.Context, ob *txbox.Outbox[*sql.Tx], tx *gorm.DB, msgs ...txbox.Message) ([]string, error) {
	sqlTx, err := SQLTx(tx)
	if err != nil {
		return nil, err
	}
	return ob.Add(ctx, sqlTx, msgs...)
}

// WithTx returns a *gorm.DB of db, with ctx, whose queries run in tx: a
// transaction begun outside GORM, such as the one an inbox handler gets. db
// itself is not changed. Committing or rolling back tx is its owner's
// business (the consumer's, for a handler), not GORM's: do not call
// Commit or Rollback on the result.
func WithTx(ctx context.Context, db *gorm.DB, tx *sql.Tx) *gorm.DB {
	s := db.WithContext(ctx) // a Statement of its own: db's is untouched
	s.Statement.ConnPool = tx
	return s
}
