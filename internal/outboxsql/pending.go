package outboxsql

import (
	"context"
	"time"

	"github.com/txbox/txbox/driver"
)

// PendingRow is an undelivered outbox row, as ListPending reports it.
type PendingRow struct {
	Seq int64
	Row
	CreatedAt time.Time
}

// ListPending returns the undelivered rows (dead ones included) of the
// quoted table that ex sees, oldest first: through the caller's
// transaction, its own uncommitted rows too. It is txboxtest's view of the
// outbox and reads every row: it is for tests, not for production tables.
func ListPending(ctx context.Context, d driver.Dialect, ex driver.Executor, table string) ([]PendingRow, error) {
	dl, err := newDialect(d, table)
	if err != nil {
		return nil, err
	}
	rows, err := ex.Query(ctx, dl.queries().listPending)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PendingRow
	created := dl.newTime()
	for rows.Next() {
		var r PendingRow
		if err := rows.Scan(&r.Seq, &r.ID, &r.Topic, &r.Key, &r.Payload, &r.Headers, created.dest()); err != nil {
			return nil, err
		}
		r.CreatedAt = created.time()
		out = append(out, r)
	}
	return out, rows.Err()
}
