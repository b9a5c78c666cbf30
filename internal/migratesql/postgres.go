package migratesql

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/postgres.sql
var postgresSQL string

// postgres serialises Ups on a lock of the tracking table, held until the
// migration's transaction ends.
type postgres struct {
	queries
	lock, lockTimeout, holders string
}

var _ Dialect = (*postgres)(nil)

func (p *postgres) Lock(ctx context.Context, tx txboxdriver.Tx) (func(context.Context) error, error) {
	if _, err := tx.Exec(ctx, p.lock); err != nil {
		return nil, err
	}
	return noUnlock, nil
}

func (p *postgres) LockTimeout(ctx context.Context, tx txboxdriver.Tx, d time.Duration) (func(context.Context) error, error) {
	_, err := tx.Exec(ctx, p.lockTimeout, strconv.FormatInt(max(d.Milliseconds(), 1), 10)+"ms")
	return noUnlock, err
}

// LockTimedOut: SQLSTATE 55P03, lock_not_available.
func (p *postgres) LockTimedOut(err error) bool {
	var state interface{ SQLState() string }
	return errors.As(err, &state) && state.SQLState() == "55P03"
}

func (p *postgres) Holders(ctx context.Context, ex txboxdriver.Executor, table string) (string, error) {
	rows, err := ex.Query(ctx, p.holders, table)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var pid int64
		var app, state, mode string
		var age float64
		if err := rows.Scan(&pid, &app, &state, &mode, &age); err != nil {
			return "", err
		}
		h := "pid " + strconv.FormatInt(pid, 10)
		if app != "" {
			h += " (" + strconv.Quote(app) + ")"
		}
		h += fmt.Sprintf(", %s, its transaction open %s, holds %s", state, (time.Duration(age * float64(time.Second))).Round(time.Millisecond), mode)
		out = append(out, h)
	}
	return strings.Join(out, "; "), rows.Err()
}
