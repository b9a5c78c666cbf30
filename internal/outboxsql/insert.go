package outboxsql

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/sqlname"
)

// Row is one message to insert.
type Row struct {
	ID      string
	Topic   string
	Key     string // "" is stored as NULL
	Payload []byte
	Headers string // JSON object text
}

// maxRowsPerInsert keeps one statement under every dialect's bind-parameter
// limit (PostgreSQL 65535, SQLite 32766, MySQL 65535) at 5 per row.
const maxRowsPerInsert = 1000

// Inserter writes rows into one outbox table with multi-row INSERTs.
type Inserter struct {
	dialect driver.Dialect
	table   string

	mu    sync.Mutex
	cache map[int]string // row count → statement
}

// NewInserter returns an Inserter for the quoted table name.
func NewInserter(d driver.Dialect, table string) *Inserter {
	return &Inserter{dialect: d, table: table, cache: map[int]string{}}
}

// Insert writes rows through ex in as few statements as the parameter
// limits allow: one round trip for up to 1000 rows.
func (in *Inserter) Insert(ctx context.Context, ex driver.Executor, rows []Row) error {
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerInsert)
		args := make([]any, 0, 5*n)
		for _, r := range rows[:n] {
			var key any
			if r.Key != "" {
				key = r.Key
			}
			args = append(args, r.ID, r.Topic, key, r.Payload, r.Headers)
		}
		if in.dialect == driver.MySQL && n > 1 {
			if err := in.lockKeys(ctx, ex, rows[:n]); err != nil {
				return err
			}
		}
		if _, err := ex.Exec(ctx, in.statement(n), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

func (in *Inserter) statement(n int) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.cache[n]; ok {
		return s
	}
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(in.table)
	b.WriteString(" (message_id, topic, ordering_key, payload, headers) VALUES ")
	p := 1
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for j := 0; j < 5; j++ {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(placeholder(in.dialect, p))
			p++
		}
		b.WriteByte(')')
	}
	s := b.String()
	if n <= 16 { // keep the cache small: big batches are rare and cheap to build
		in.cache[n] = s
	}
	return s
}

// lockKeys takes, on MySQL, the key-order locks of rows before a multi-row
// INSERT writes them. The table's BEFORE INSERT trigger takes the lock of
// each keyed row before its id is drawn, which suffices for one row; but
// InnoDB reserves the ids of every row of a multi-row INSERT when it writes
// the first one, so a later row's lock would come after its id. Locking
// every bucket first, in bucket order (which also keeps concurrent writers
// free of deadlocks), restores "id order = commit order" per key. See
// migrate/sql/mysql/outbox/002_key_order.sql.
func (in *Inserter) lockKeys(ctx context.Context, ex driver.Executor, rows []Row) error {
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
	q := "SELECT bucket FROM " + in.keysTable() + " WHERE bucket IN (" +
		strings.TrimSuffix(strings.Repeat("CRC32(?) & 4095,", len(args)), ",") + ") ORDER BY bucket FOR UPDATE"
	rs, err := ex.Query(ctx, q, args...)
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

// keysTable is the quoted <table>_keys of MySQL's key-order locks.
func (in *Inserter) keysTable() string {
	return sqlname.Quote(driver.MySQL, sqlname.Derived(strings.Trim(in.table, "`"), "keys"))
}

// placeholder returns the n-th (1-based) bind parameter of dialect d.
func placeholder(d driver.Dialect, n int) string {
	switch d {
	case driver.Postgres:
		return "$" + strconv.Itoa(n)
	case driver.SQLite:
		return "?" + strconv.Itoa(n)
	default:
		return "?"
	}
}
