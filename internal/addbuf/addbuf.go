// Package addbuf holds the buffer that defers the INSERTs of Outbox.Add
// within one transaction, carried to Add in a context: the consumer's
// batched inbox uses one per batch transaction.
package addbuf

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/txboxdriver"
)

// Buffer defers the INSERTs of Outbox.Add in one transaction: an Add
// whose ctx carries the buffer (With) and whose tx is the
// buffer's validates its messages, returns their ids and keeps their rows,
// and Flush later inserts the rows of every such Add together, in one
// statement per outbox table (up to 1000 rows per round trip). The
// consumer's batched inbox uses one per batch transaction, flushed just
// before its COMMIT, so that a handler's Add costs no round trip of its
// own. An Add with another transaction writes at once, as always.
//
// Rows held in a buffer are not visible in the transaction until Flush.
// A Buffer is safe for concurrent use.
type Buffer struct {
	tx   any
	mu   sync.Mutex
	adds []bufferedAdd
}

type bufferedAdd struct {
	ins  *outboxsql.Inserter
	rows []outboxsql.Row
}

type addBufferKey struct{}

// New returns an empty buffer for the Adds made with tx.
func New(tx any) *Buffer { return &Buffer{tx: tx} }

// With returns ctx carrying b (nil: none).
func With(ctx context.Context, b *Buffer) context.Context {
	return context.WithValue(ctx, addBufferKey{}, b)
}

// From returns the buffer ctx carries, or nil.
func From(ctx context.Context) *Buffer {
	b, _ := ctx.Value(addBufferKey{}).(*Buffer)
	return b
}

// Holds reports whether b defers the Adds made with tx: tx is b's (a
// transaction type that cannot be compared never is).
func (b *Buffer) Holds(tx any) (same bool) {
	if b == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return b.tx == tx
}

// Add keeps the rows of one Add, to insert with ins at Flush.
func (b *Buffer) Add(ins *outboxsql.Inserter, rows []outboxsql.Row) {
	b.mu.Lock()
	b.adds = append(b.adds, bufferedAdd{ins: ins, rows: rows})
	b.mu.Unlock()
}

// Len returns how many Adds b holds.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.adds)
}

// Truncate forgets the Adds after the first n (those of a handler that
// failed and was rolled back to its savepoint).
func (b *Buffer) Truncate(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n < len(b.adds) {
		clear(b.adds[n:])
		b.adds = b.adds[:n]
	}
}

// Flush inserts the rows b holds through ex, which runs in b's
// transaction, and empties b. The rows of one outbox go in together,
// ordered by key (stable: each key's messages in the order of the Adds),
// as one Add of them all would, and the outboxes in the order of their
// table names: every transaction that flushes a buffer takes the per-key
// order locks of its keyed rows (which the rows' INSERT takes row by row,
// in order) in one global order, so two of them never wait on each other's
// keys in a cycle.
func (b *Buffer) Flush(ctx context.Context, ex txboxdriver.Executor) error {
	b.mu.Lock()
	adds := b.adds
	b.adds = nil
	b.mu.Unlock()
	ins := map[string]*outboxsql.Inserter{} // by table: two Outboxes of one table write as one
	rows := map[string][]outboxsql.Row{}
	for _, a := range adds {
		t := a.ins.Table()
		if ins[t] == nil {
			ins[t] = a.ins
		}
		rows[t] = append(rows[t], a.rows...)
	}
	for _, t := range slices.Sorted(maps.Keys(ins)) {
		rs := rows[t]
		slices.SortStableFunc(rs, func(a, b outboxsql.Row) int { return strings.Compare(a.Key, b.Key) })
		if err := ins[t].Insert(ctx, ex, rs); err != nil {
			return fmt.Errorf("txbox: add (deferred): %w", err)
		}
	}
	return nil
}
