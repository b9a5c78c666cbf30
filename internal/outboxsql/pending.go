package outboxsql

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// PendingRow is an undelivered outbox row, as ListPending reports it.
type PendingRow struct {
	Seq int64
	Row
	CreatedAt     time.Time
	Attempts      int
	NextAttemptAt time.Time // zero: due since CreatedAt
	LastError     string
	DeadAt        time.Time // zero: not dead
	Parked        bool      // not dead, and a dead row shares its key
	// Invalid says why a column could not be read (a value of the wrong
	// type, written by plain SQL on SQLite), or is nil.
	Invalid error
}

// PendingFilter selects undelivered rows; the zero value selects every row
// that is not dead.
type PendingFilter struct {
	Seq         int64  // only this row; 0: any
	Topic, Key  string // only rows of this topic, of this key; "": any
	MinAttempts int    // only rows tried at least this often
	Dead        bool   // dead rows too
	Limit       int    // at most this many rows; 0: no limit
}

func (f PendingFilter) limit() int64 {
	if f.Limit <= 0 {
		return math.MaxInt64
	}
	return int64(f.Limit)
}

// ListPending returns the undelivered rows (dead ones included) of the
// quoted table that ex sees, oldest first: through the caller's
// transaction, its own uncommitted rows too. It is txboxtest's view of the
// outbox and reads every row: it is for tests, not for production tables.
func ListPending(ctx context.Context, d txboxdriver.Dialect, ex txboxdriver.Executor, table string) ([]PendingRow, error) {
	dl, err := newDialect(d, table)
	if err != nil {
		return nil, err
	}
	return listPending(ctx, dl, ex, PendingFilter{Dead: true})
}

// Pending returns the undelivered rows that f selects, oldest first.
func (s *Store) Pending(ctx context.Context, f PendingFilter) ([]PendingRow, error) {
	return listPending(ctx, s.d, s.pool, f)
}

func listPending(ctx context.Context, dl dialect, ex txboxdriver.Executor, f PendingFilter) ([]PendingRow, error) {
	q, args := dl.listPending(f)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PendingRow
	created, next, dead := dl.newTime(), dl.newNullTime(), dl.newNullTime()
	attempts := dl.newInt()
	for rows.Next() {
		var r PendingRow
		if err := rows.Scan(&r.Seq, &r.ID, &r.Topic, &r.Key, &r.Payload, &r.Headers, created.dest(),
			attempts.dest(), next.dest(), &r.LastError, dead.dest(), &r.Parked); err != nil {
			return nil, err
		}
		r.CreatedAt, r.Attempts, r.NextAttemptAt, r.DeadAt = created.time(), attempts.int(), next.time(), dead.time()
		for _, c := range []struct {
			name string
			err  error
		}{{"created_at", created.err()}, {"attempts", attempts.err()}, {"next_attempt_at", next.err()}, {"dead_at", dead.err()}} {
			if c.err != nil && r.Invalid == nil {
				r.Invalid = fmt.Errorf("%s %w", c.name, c.err)
			}
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// TopicCount is one topic's undelivered rows, as BacklogTopics reports it.
type TopicCount struct {
	Topic       string
	Undelivered int64 // dead ones included
	Dead        int64
}

// BacklogTopics returns the limit topics with the most undelivered rows,
// most first.
func (s *Store) BacklogTopics(ctx context.Context, limit int) ([]TopicCount, error) {
	rows, err := s.pool.Query(ctx, s.d.queries().backlogTopics, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TopicCount
	for rows.Next() {
		var c TopicCount
		if err := rows.Scan(&c.Topic, &c.Undelivered, &c.Dead); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
