package outboxsql

import (
	"context"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// Cancelled is what Inserter.Cancel did and found.
type Cancelled struct {
	// Discarded counts the rows deleted: rows with the message id that no
	// relay had published, dead or held.
	Discarded int
	// When nothing was discarded, the rows with the id that were
	// Published (the last at PublishedAt), are Dead, or are InFlight (held
	// by a relay's live lease, SQLite only; elsewhere a cancel waits for
	// the relay's claim to end).
	Published   int
	PublishedAt time.Time
	Dead        int
	InFlight    int
}

// Cancel deletes, through ex, the rows with message id id that are still
// to deliver and not dead. When it deletes none it reads why: rows
// published, dead or being delivered, or none at all (the zero
// Cancelled).
func (in *Inserter) Cancel(ctx context.Context, ex txboxdriver.Executor, id string) (Cancelled, error) {
	var c Cancelled
	if in.err != nil {
		return c, in.err
	}
	q := in.d.queries()
	rows, err := ex.Query(ctx, q.cancelFind, id)
	if err != nil {
		return c, err
	}
	var seqs []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			rows.Close()
			return c, err
		}
		seqs = append(seqs, seq)
	}
	cerr := rows.Close()
	if err := rows.Err(); err != nil {
		return c, err
	}
	if cerr != nil {
		return c, cerr
	}
	if len(seqs) > 0 {
		stmt, args := in.d.withIDs(q.cancel, seqs)
		n, err := ex.Exec(ctx, stmt, args...)
		if err != nil {
			return c, err
		}
		if c.Discarded = int(n); c.Discarded > 0 {
			return c, nil
		}
	}
	rows, err = ex.Query(ctx, q.cancelState, id)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	at := in.d.newNullTime()
	published, dead, inFlight := in.d.newInt(), in.d.newInt(), in.d.newInt()
	if rows.Next() {
		if err := rows.Scan(published.dest(), at.dest(), dead.dest(), inFlight.dest()); err != nil {
			return c, err
		}
		c.Published, c.PublishedAt, c.Dead, c.InFlight = published.int(), at.time(), dead.int(), inFlight.int()
	}
	return c, rows.Err()
}
