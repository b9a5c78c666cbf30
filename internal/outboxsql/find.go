package outboxsql

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// Find is a filter over undelivered rows, for the tools that page through
// them (txbox dead list, pending list and their bulk actions).
type Find struct {
	After       int64     // only rows with a greater seq
	Topic, Key  string    // exactly; "": any
	Error       string    // last_error contains this text; "": any
	Since       time.Time // dead rows: dead at or after; others: created at or after; zero: any
	MinAttempts int       // only rows tried at least this often
	Limit       int       // at most this many rows, at least 1
	// DueAfter, when not zero, selects the rows scheduled and not due by
	// then: never tried, next_attempt_at after it (Message.DeliverAt).
	DueAfter time.Time
}

// Finder pages through the undelivered rows of one table by Find.
type Finder struct {
	d       dialect
	dialect txboxdriver.Dialect
	pool    txboxdriver.Pool
	table   string
}

// NewFinder returns a Finder for the quoted table.
func NewFinder(d txboxdriver.Dialect, pool txboxdriver.Pool, table string) (*Finder, error) {
	dl, err := newDialect(d, table)
	if err != nil {
		return nil, err
	}
	return &Finder{d: dl, dialect: d, pool: pool, table: table}, nil
}

// where returns the conditions of f after "WHERE published_at IS NULL"
// and their arguments, for rows aliased o.
func (fd *Finder) where(f Find) (string, []any) {
	var b strings.Builder
	var args []any
	n := 0
	ph := func(v any) string {
		n++
		args = append(args, v)
		switch fd.dialect {
		case txboxdriver.Postgres:
			return fmt.Sprintf("$%d", n)
		case txboxdriver.SQLite:
			return fmt.Sprintf("?%d", n)
		}
		return "?"
	}
	textArg := func(v string) string {
		if fd.dialect == txboxdriver.Postgres {
			return ph(v) + "::text"
		}
		return ph(v)
	}
	fmt.Fprintf(&b, " AND o.id > %s AND o.attempts >= %s", ph(f.After), ph(f.MinAttempts))
	if !f.DueAfter.IsZero() {
		fmt.Fprintf(&b, " AND o.attempts = 0 AND o.next_attempt_at > %s", ph(fd.d.timeArg(f.DueAfter)))
	}
	if f.Topic != "" {
		fmt.Fprintf(&b, " AND o.topic = %s", textArg(f.Topic))
	}
	if f.Key != "" {
		fmt.Fprintf(&b, " AND o.ordering_key = %s", textArg(f.Key))
	}
	if f.Error != "" {
		switch fd.dialect {
		case txboxdriver.Postgres:
			fmt.Fprintf(&b, " AND strpos(coalesce(o.last_error, ''), %s) > 0", textArg(f.Error))
		case txboxdriver.SQLite:
			fmt.Fprintf(&b, " AND instr(coalesce(o.last_error, ''), %s) > 0", ph(f.Error))
		default:
			fmt.Fprintf(&b, " AND LOCATE(%s, COALESCE(o.last_error, '')) > 0", ph(f.Error))
		}
	}
	return b.String(), args
}

// page is how many rows one statement reads when Since is filtered here.
const findPage = 500

// Dead returns up to f.Limit dead rows that f selects, oldest first, and
// whether more rows match after them.
func (fd *Finder) Dead(ctx context.Context, f Find) ([]DeadRow, bool, error) {
	var out []DeadRow
	for {
		cond, args := fd.where(f)
		q := "SELECT o.id, o.message_id, o.topic, COALESCE(o.ordering_key, ''), o.attempts, COALESCE(o.last_error, ''), o.created_at, o.dead_at, " +
			"(SELECT COUNT(*) FROM " + fd.table + " p WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.dead_at IS NULL AND p.id > o.id) " +
			"FROM " + fd.table + " o WHERE o.published_at IS NULL AND o.dead_at IS NOT NULL" + cond +
			fmt.Sprintf(" ORDER BY o.id LIMIT %d", findPage)
		rows, err := fd.pool.Query(ctx, q, args...)
		if err != nil {
			return out, false, err
		}
		created, dead := fd.d.newTime(), fd.d.newTime()
		read := 0
		for rows.Next() {
			read++
			var d DeadRow
			if err := rows.Scan(&d.Seq, &d.ID, &d.Topic, &d.Key, &d.Attempts, &d.LastError, created.dest(), dead.dest(), &d.Parked); err != nil {
				rows.Close()
				return out, false, err
			}
			d.CreatedAt, d.DeadAt = created.time(), dead.time()
			f.After = d.Seq
			if !f.Since.IsZero() && d.DeadAt.Before(f.Since) {
				continue
			}
			if len(out) == max(f.Limit, 1) {
				rows.Close()
				return out, true, nil
			}
			out = append(out, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, false, err
		}
		if read < findPage {
			return out, false, nil
		}
	}
}

// Undelivered returns up to f.Limit undelivered rows that f selects (dead
// ones with dead), oldest first, without payloads, and whether more rows
// match after them.
func (fd *Finder) Undelivered(ctx context.Context, f Find, dead bool) ([]PendingRow, bool, error) {
	var out []PendingRow
	state := " AND o.dead_at IS NULL"
	if dead {
		state = ""
	}
	for {
		cond, args := fd.where(f)
		q := "SELECT o.id, o.message_id, o.topic, COALESCE(o.ordering_key, ''), o.created_at, o.attempts, o.next_attempt_at, COALESCE(o.last_error, ''), o.dead_at, " +
			"CASE WHEN o.dead_at IS NULL AND o.ordering_key IS NOT NULL AND EXISTS (SELECT 1 FROM " + fd.table + " d WHERE d.ordering_key = o.ordering_key AND d.dead_at IS NOT NULL) THEN 1 ELSE 0 END " +
			"FROM " + fd.table + " o WHERE o.published_at IS NULL" + state + cond + fmt.Sprintf(" ORDER BY o.id LIMIT %d", findPage)
		rows, err := fd.pool.Query(ctx, q, args...)
		if err != nil {
			return out, false, err
		}
		created, next, deadAt := fd.d.newTime(), fd.d.newNullTime(), fd.d.newNullTime()
		attempts := fd.d.newInt()
		read := 0
		for rows.Next() {
			read++
			var r PendingRow
			var parked int
			if err := rows.Scan(&r.Seq, &r.ID, &r.Topic, &r.Key, created.dest(), attempts.dest(), next.dest(), &r.LastError, deadAt.dest(), &parked); err != nil {
				rows.Close()
				return out, false, err
			}
			r.CreatedAt, r.Attempts, r.NextAttemptAt, r.DeadAt, r.Parked = created.time(), attempts.int(), next.time(), deadAt.time(), parked == 1
			f.After = r.Seq
			at := r.CreatedAt
			if !r.DeadAt.IsZero() {
				at = r.DeadAt
			}
			if !f.Since.IsZero() && at.Before(f.Since) {
				continue
			}
			if len(out) == max(f.Limit, 1) {
				rows.Close()
				return out, true, nil
			}
			out = append(out, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, false, err
		}
		if read < findPage {
			return out, false, nil
		}
	}
}

// FoundRow is a row of the outbox in any state, as Locate returns it.
type FoundRow struct {
	PendingRow
	PublishedAt time.Time // zero: not delivered
}

// Locate returns the rows, in any state (delivered ones while they are
// kept), whose seq is seq or whose message id is id, oldest first.
func (fd *Finder) Locate(ctx context.Context, seq int64, id string) ([]FoundRow, error) {
	headers := "o.headers"
	var cond string
	var args []any
	switch fd.dialect {
	case txboxdriver.Postgres:
		headers = "o.headers::text"
		cond, args = "o.id = $1 OR o.message_id = $2::text", []any{seq, id}
	case txboxdriver.SQLite:
		cond, args = "o.id = ?1 OR o.message_id = ?2", []any{seq, id}
	default:
		cond, args = "o.id = ? OR o.message_id = ?", []any{seq, id}
	}
	q := "SELECT o.id, o.message_id, o.topic, COALESCE(o.ordering_key, ''), o.payload, " + headers + ", o.created_at, o.attempts, o.next_attempt_at, " +
		"COALESCE(o.last_error, ''), o.dead_at, o.published_at, " +
		"CASE WHEN o.dead_at IS NULL AND o.published_at IS NULL AND o.ordering_key IS NOT NULL AND EXISTS (SELECT 1 FROM " + fd.table +
		" d WHERE d.ordering_key = o.ordering_key AND d.dead_at IS NOT NULL AND d.published_at IS NULL) THEN 1 ELSE 0 END " +
		"FROM " + fd.table + " o WHERE " + cond + " ORDER BY o.id LIMIT 100"
	rows, err := fd.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []FoundRow
	created, next, dead, published := fd.d.newTime(), fd.d.newNullTime(), fd.d.newNullTime(), fd.d.newNullTime()
	attempts := fd.d.newInt()
	for rows.Next() {
		var r FoundRow
		var parked int
		if err := rows.Scan(&r.Seq, &r.ID, &r.Topic, &r.Key, &r.Payload, &r.Headers, created.dest(), attempts.dest(), next.dest(),
			&r.LastError, dead.dest(), published.dest(), &parked); err != nil {
			return nil, err
		}
		r.CreatedAt, r.Attempts, r.NextAttemptAt, r.DeadAt, r.PublishedAt = created.time(), attempts.int(), next.time(), dead.time(), published.time()
		r.Parked = parked == 1
		out = append(out, r)
	}
	return out, rows.Err()
}

// ParkedBy returns the seq of the oldest dead row of key, 0 if none.
func (fd *Finder) ParkedBy(ctx context.Context, key string) (int64, error) {
	rows, _, err := fd.Dead(ctx, Find{Key: key, Limit: 1})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	return rows[0].Seq, nil
}

// Throughput counts the rows published, and the rows gone dead, at or
// after since. It reads every row of the table that is published or dead
// (no index serves it): a figure for an operator's look, not a loop.
func (fd *Finder) Throughput(ctx context.Context, since time.Time) (published, dead int64, err error) {
	var arg any = since
	ph := "?"
	switch fd.dialect {
	case txboxdriver.Postgres:
		ph = "$1"
	case txboxdriver.SQLite:
		arg, ph = since.UnixMicro(), "?1"
	default:
		arg = since.UTC()
	}
	q := "SELECT COUNT(CASE WHEN published_at >= " + ph + " THEN 1 END), " +
		"COUNT(CASE WHEN dead_at >= " + ph + " THEN 1 END) FROM " + fd.table +
		" WHERE published_at IS NOT NULL OR dead_at IS NOT NULL"
	args := []any{arg}
	if fd.dialect == txboxdriver.MySQL {
		args = append(args, arg)
	}
	rows, err := fd.pool.Query(ctx, q, args...)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	p, d := fd.d.newInt(), fd.d.newInt()
	if rows.Next() {
		if err := rows.Scan(p.dest(), d.dest()); err != nil {
			return 0, 0, err
		}
	}
	return int64(p.int()), int64(d.int()), rows.Err()
}
