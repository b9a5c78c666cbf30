package outboxsql

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/txbox/txbox/driver"
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
