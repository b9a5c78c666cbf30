package migratesql

import (
	"context"
	_ "embed"
	"errors"

	"github.com/txbox/txbox/driver"
)

//go:embed sql/mysql.sql
var mysqlSQL string

// mysql serialises Ups on a named lock of the connection: DDL commits
// implicitly, so a table lock would not last.
type mysql struct {
	queries
	lock, unlock string
}

var _ Dialect = (*mysql)(nil)

func (m *mysql) Lock(ctx context.Context, tx driver.Tx) (func(context.Context) error, error) {
	rows, err := tx.Query(ctx, m.lock)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var got *int64
	if rows.Next() {
		if err := rows.Scan(&got); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if got == nil || *got != 1 {
		return nil, errors.New("another txbox migrate up or down holds the lock txbox_migrate")
	}
	return func(ctx context.Context) error {
		_, err := tx.Exec(ctx, m.unlock)
		return err
	}, nil
}
