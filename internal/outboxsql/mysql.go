package outboxsql

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/mysql.sql
var mysqlSQL string

// mysql is the outbox's SQL on MySQL and MariaDB: row locks held in a READ
// COMMITTED claim transaction, ids bound one placeholder each, times
// computed by the server from durations passed in microseconds.
type mysql struct {
	q queries
	// readCommitted turns a transaction just begun into a READ COMMITTED
	// one, for a Pool without txboxdriver.TxBeginner (see beginClaim).
	readCommitted [3]string
}

var _ dialect = (*mysql)(nil)

func newMySQL(table string) (*mysql, error) {
	m := &mysql{}
	err := m.q.load(txboxdriver.MySQL, mysqlSQL, table, map[string]*string{
		"lock_keys":                &m.q.lockKeys,
		"read_committed_end_empty": &m.readCommitted[0],
		"read_committed_set":       &m.readCommitted[1],
		"read_committed_start":     &m.readCommitted[2],
	})
	return m, err
}

func (m *mysql) queries() *queries { return &m.q }

func (m *mysql) placeholder(int) string { return "?" }

// beginClaim begins a READ COMMITTED transaction. Under REPEATABLE READ
// (InnoDB's default) the claim's scan takes gap locks at the end of the
// pending range, right where writers insert new rows: writers would wait
// for a relay's publish, and deadlock with its marks. READ COMMITTED takes
// no gap locks. The connection's own default level is left as it was.
//
// A Pool without txboxdriver.TxBeginner can only begin at the default level, and
// SET TRANSACTION is refused inside a transaction: the empty transaction is
// committed and a new one started on the same connection, which the later
// Commit or Rollback ends.
//
// The lease is not applied: MySQL has no per-transaction idle timeout
// (wait_timeout is per connection and would outlive the claim on a pooled
// connection the application shares), so a relay whose connection vanished
// holds its row locks until the server notices (see docs/reference/guarantees.md).
func (m *mysql) beginClaim(ctx context.Context, pool txboxdriver.Pool, _ time.Duration) (txboxdriver.Tx, error) {
	if b, ok := pool.(txboxdriver.TxBeginner); ok {
		return b.BeginTx(ctx, txboxdriver.TxOptions{Isolation: txboxdriver.LevelReadCommitted})
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range m.readCommitted {
		if _, err := tx.Exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("claim transaction: %s: %w", q, err)
		}
	}
	return tx, nil
}

func (m *mysql) claim(limit int, from int64, _ string, _, _ time.Time) (string, []any) {
	return bindInts(m.q.claim, []any{from, limit, from, limit, limit})
}

func (m *mysql) markPublished(seqs []int64, _ string, _ time.Time) (string, []any) {
	return m.withIDs(m.q.markPublished, seqs)
}

func (m *mysql) deletePublished(seqs []int64, _ string) (string, []any) {
	return m.withIDs(m.q.deletePublished, seqs)
}

func (m *mysql) reject(r Rejection, maxAttempts int, _ string, _ time.Time) (string, []any) {
	return m.q.reject, []any{maxAttempts, r.Err, r.RetryAfter.Microseconds(), r.Seq}
}

// cleanup passes the cutoff as an age, counted back from the server's UTC
// clock. Its query locks the rows (see lockingCleanup).
func (m *mysql) cleanup(cutoff time.Time, limit int) (string, []any) {
	return m.q.cleanup, []any{max(time.Since(cutoff), 0).Microseconds(), limit}
}

var _ lockingCleanup = (*mysql)(nil)

func (m *mysql) deleteLocked(seqs []int64) (string, []any) {
	return m.withIDs(m.q.deletePublished, seqs)
}

func (m *mysql) counts(time.Time) (string, []any) { return m.q.counts, nil }

// withIDs writes the ids into q's list: a primary-key IN list (bindInts).
func (m *mysql) withIDs(q string, seqs []int64) (string, []any) {
	args := make([]any, len(seqs))
	for i, v := range seqs {
		args[i] = v
	}
	return bindInts(expandList(m, q, len(seqs)), args)
}

// bindInts writes args into q in place of its ?s, in order, as decimal
// literals, when every one is an integer (ids, lanes, limits: values the
// relay computes, never text); else it returns q and args as they are.
// Through database/sql a statement with bind parameters is a prepare, an
// execute and a close on the server (two round trips, unless the DSN sets
// interpolateParams); one without them is a single query. The claim and
// the marks are the relay's hot path.
func bindInts(q string, args []any) (string, []any) {
	if strings.Count(q, "?") != len(args) {
		return q, args // let the server say what is wrong
	}
	for _, a := range args {
		switch a.(type) {
		case int, int16, int64:
		default:
			return q, args
		}
	}
	var b strings.Builder
	b.Grow(len(q) + 8*len(args))
	for _, a := range args {
		head, rest, _ := strings.Cut(q, "?")
		b.WriteString(head)
		switch v := a.(type) {
		case int:
			b.WriteString(strconv.Itoa(v))
		case int16:
			b.WriteString(strconv.FormatInt(int64(v), 10))
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		}
		q = rest
	}
	b.WriteString(q)
	return b.String(), nil
}

func (m *mysql) newTime() timeCol { return &anyTime{} }
func (m *mysql) newInt() intCol   { return &nativeInt{} }

func (m *mysql) backlog(time.Time) (string, []any) { return m.q.backlog, nil }

func (m *mysql) newNullTime() timeCol { return &anyTime{} }

// listPending repeats the arguments the statement reads twice: MySQL's
// placeholders are positional.
func (m *mysql) listPending(f PendingFilter) (string, []any) {
	return m.q.listPending, []any{f.Seq, f.Seq, f.Topic, f.Topic, f.Key, f.Key, f.MinAttempts, f.Dead, f.limit()}
}

// timeArg binds t as text: the DATETIME(6) columns hold UTC whatever the
// connection's loc, which a time.Time argument would be converted to.
func (m *mysql) timeArg(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.000000") }
