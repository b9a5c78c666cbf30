package migratesql

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/mysql.sql
var mysqlSQL string

// mysql serialises Ups on a named lock of the connection: DDL commits
// implicitly, so a table lock would not last.
type mysql struct {
	queries
	lock, unlock, lockTimeout, lockTimeoutReset string
}

var _ Dialect = (*mysql)(nil)

func (m *mysql) Lock(ctx context.Context, tx txboxdriver.Tx) (func(context.Context) error, error) {
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

// LockTimeout sets the session's lock_wait_timeout (whole seconds, at least
// one), which bounds the wait of DDL for a table's metadata lock, and
// returns what sets it back to the server's default.
func (m *mysql) LockTimeout(ctx context.Context, tx txboxdriver.Tx, d time.Duration) (func(context.Context) error, error) {
	secs := max((d+time.Second-1)/time.Second, 1)
	if _, err := tx.Exec(ctx, m.lockTimeout, int64(secs)); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := tx.Exec(ctx, m.lockTimeoutReset)
		return err
	}, nil
}

// LockTimedOut: error 1205, "Lock wait timeout exceeded", as go-sql-driver
// prints it.
func (m *mysql) LockTimedOut(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Error 1205 ") || strings.Contains(msg, "Error 1205:")
}

// Holders cannot tell: an idle transaction's metadata lock shows in
// performance_schema on MySQL 8 only, and in no table of MariaDB's by
// default.
func (m *mysql) Holders(context.Context, txboxdriver.Executor, string) (string, error) {
	return "", nil
}
