package outboxsql

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// Row is one message to insert.
type Row struct {
	ID      string
	Topic   string
	Key     string // "" is stored as NULL
	Payload []byte
	Headers string // JSON object text
	// DeliverAt, when not zero, is the row's next_attempt_at: the relay
	// claims it from then on (Message.DeliverAt).
	DeliverAt time.Time
}

// maxRowsPerInsert keeps one statement under every dialect's bind-parameter
// limit (PostgreSQL 65535, SQLite 32766, MySQL 65535) at 6 per row.
const maxRowsPerInsert = 1000

// Inserter writes rows into one outbox table with multi-row INSERTs.
type Inserter struct {
	table string // quoted
	d     dialect
	err   error  // no SQL for the dialect: every Insert fails with it
	emit  string // NewEmitter's prefix: rows go into the log, not a table

	mu    sync.Mutex
	cache map[int]string // row count → statement; negative: insert_at's
}

// NewInserter returns an Inserter for the quoted table name. A dialect
// without outbox SQL makes every Insert fail.
func NewInserter(d txboxdriver.Dialect, table string) *Inserter {
	dl, err := newDialect(d, table)
	return &Inserter{table: table, d: dl, err: err, cache: map[int]string{}}
}

// Table returns the quoted table name the Inserter writes to (an
// Emitter's: its prefix, marked as not a table).
func (in *Inserter) Table() string { return in.table }

// Insert writes rows through ex in as few statements as the parameter
// limits allow: one round trip for up to 1000 rows.
func (in *Inserter) Insert(ctx context.Context, ex txboxdriver.Executor, rows []Row) error {
	if in.err != nil {
		return in.err
	}
	if in.emit != "" {
		return in.emitRows(ctx, ex, rows)
	}
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerInsert)
		// A statement sets next_attempt_at only when one of its rows is
		// scheduled: an unscheduled write sends what it always did.
		at := slices.ContainsFunc(rows[:n], func(r Row) bool { return !r.DeliverAt.IsZero() })
		args := make([]any, 0, 6*n)
		for _, r := range rows[:n] {
			var key any
			if r.Key != "" {
				key = r.Key
			}
			args = append(args, r.ID, r.Topic, key, r.Payload, r.Headers)
			if at {
				var due any
				if !r.DeliverAt.IsZero() {
					due = in.d.timeArg(r.DeliverAt)
				}
				args = append(args, due)
			}
		}
		if n > 1 {
			if err := in.lockKeys(ctx, ex, rows[:n]); err != nil {
				return err
			}
		}
		if _, err := ex.Exec(ctx, in.statement(n, at), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// statement is the INSERT of n rows; at: with next_attempt_at.
func (in *Inserter) statement(n int, at bool) string {
	q, k := in.d.queries().insert, n
	if at {
		q, k = in.d.queries().insertAt, -n
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.cache[k]; ok {
		return s
	}
	s := expandList(in.d, q, n)
	if n <= 16 { // keep the cache small: big batches are rare and cheap to build
		in.cache[k] = s
	}
	return s
}

// lockKeys takes, where the dialect needs them (MySQL), the key-order locks
// of rows before a multi-row INSERT writes them. The table's BEFORE INSERT
// trigger takes the lock of each keyed row before its id is drawn, which
// suffices for one row; but InnoDB reserves the ids of every row of a
// multi-row INSERT when it writes the first one, so a later row's lock
// would come after its id. Locking every bucket first, in bucket order
// (which also keeps concurrent writers free of deadlocks), restores "id
// order = commit order" per key. See
// txboxmigrate/sql/mysql/outbox/001_create_outbox.sql.
func (in *Inserter) lockKeys(ctx context.Context, ex txboxdriver.Executor, rows []Row) error {
	q := in.d.queries().lockKeys
	if q == "" {
		return nil
	}
	seen := map[string]bool{}
	var args []any
	for _, r := range rows {
		if r.Key != "" && !seen[r.Key] {
			seen[r.Key] = true
			args = append(args, r.Key)
		}
	}
	if len(args) == 0 {
		return nil
	}
	rs, err := ex.Query(ctx, expandList(in.d, q, len(args)), args...)
	if err != nil {
		return fmt.Errorf("lock ordering keys: %w", err)
	}
	for rs.Next() {
	}
	cerr := rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("lock ordering keys: %w", err)
	}
	return cerr
}
