package migratesql

import (
	"context"
	_ "embed"

	"github.com/txbox/txbox/driver"
)

//go:embed sql/postgres.sql
var postgresSQL string

// postgres serialises Ups on a lock of the tracking table, held until the
// migration's transaction ends.
type postgres struct {
	queries
	lock string
}

var _ Dialect = (*postgres)(nil)

func (p *postgres) Lock(ctx context.Context, tx driver.Tx) (func(context.Context) error, error) {
	if _, err := tx.Exec(ctx, p.lock); err != nil {
		return nil, err
	}
	return noUnlock, nil
}
