package outboxsql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// Health is the outbox table's upkeep on PostgreSQL (Store.Health).
type Health struct {
	Size, IndexSize    int64 // bytes: the table with indexes and TOAST; its indexes
	LiveRows, DeadRows int64 // row versions, the statistics collector's estimates
	// SinceVacuum is the time since the table's last VACUUM, manual or
	// auto; Vacuumed is false when it never had one.
	SinceVacuum time.Duration
	Vacuumed    bool
	// OldestTransaction is how long the oldest transaction holding a
	// snapshot (a session's, a prepared one) has been open; 0: none.
	OldestTransaction time.Duration
	// Oldest is what holds the database's horizon furthest back, or nil.
	Oldest *Snapshot
}

// Snapshot is what holds back the horizon up to which VACUUM may remove
// row versions: a session's snapshot, a prepared transaction or a
// replication slot.
type Snapshot struct {
	Kind    string        // "transaction", "prepared transaction" or "replication slot"
	Holder  string        // a pid with its application name, a gid, a slot name
	State   string        // a session's state ("idle in transaction"…), a slot's "active"/"inactive"
	Age     time.Duration // since the transaction began; 0 for a slot
	XminAge int64         // transactions since the snapshot's xmin
}

// CanReadHealth reports whether Health is supported: PostgreSQL.
func (s *Store) CanReadHealth() bool {
	_, ok := s.d.(*postgres)
	return ok
}

// Health reads, in one statement, the table's size, its dead row
// versions, its last VACUUM, and what holds the database's horizon back:
// PostgreSQL only (elsewhere an error wrapping errors.ErrUnsupported).
func (s *Store) Health(ctx context.Context) (Health, error) {
	p, ok := s.d.(*postgres)
	if !ok {
		return Health{}, fmt.Errorf("table health: %w on this database", errors.ErrUnsupported)
	}
	var h Health
	var since, oldest, secs *float64
	var kind, holder, state *string
	var xminAge *int64
	if err := queryRow(ctx, s, p.tableHealth, &h.Size, &h.IndexSize, &h.LiveRows, &h.DeadRows, &since, &oldest,
		&kind, &holder, &state, &secs, &xminAge); err != nil {
		return Health{}, err
	}
	if since != nil {
		h.Vacuumed, h.SinceVacuum = true, seconds(*since)
	}
	if oldest != nil {
		h.OldestTransaction = seconds(*oldest)
	}
	if kind != nil {
		h.Oldest = &Snapshot{Kind: *kind, Holder: *holder, State: *state, XminAge: *xminAge}
		if secs != nil {
			h.Oldest.Age = seconds(*secs)
		}
	}
	return h, nil
}

// queryRow runs q on the pool and scans its one row into dest, or returns
// txboxdriver.ErrNoRows.
func queryRow(ctx context.Context, s *Store, q string, dest ...any) error {
	rows, err := s.pool.Query(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return txboxdriver.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Err()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
