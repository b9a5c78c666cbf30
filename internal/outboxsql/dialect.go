// Package outboxsql holds the outbox's SQL for each dialect and the code that
// runs it: the multi-row insert of Outbox.Add and the relay's claim, mark,
// reject and cleanup.
//
// Each dialect is one type (postgres.go, sqlite.go, mysql.go) that owns its
// embedded SQL file, the order of its statements' arguments and the
// scanning of its timestamps; Store and Inserter run the statements the
// dialect hands them and hold every step the dialects share.
package outboxsql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox/internal/sqltext"
	"github.com/txbox/txbox/txboxdriver"
)

// dialect is one dialect's outbox SQL. The methods returning a statement
// and its arguments take every value any dialect needs (the lease token,
// the time) and use those their SQL binds.
type dialect interface {
	// queries returns the statements every dialect has.
	queries() *queries
	// placeholder returns the n-th (1-based) bind parameter.
	placeholder(n int) string
	// beginClaim opens the transaction that holds a claim's row locks
	// until Finish or Release ends it, or returns nil (and no error) when
	// the dialect leases rows instead (SQLite): a short UPDATE stamps them
	// with a token, and the marks check it. lease bounds how long the
	// server lets the transaction sit idle where the dialect can say so
	// (PostgreSQL), so that a relay whose connection vanished does not
	// hold the rows' locks until TCP notices.
	beginClaim(ctx context.Context, pool txboxdriver.Pool, lease time.Duration) (txboxdriver.Tx, error)
	// claim returns Store.Claim's query.
	claim(limit int, from int64, token string, until, now time.Time) (string, []any)
	// markPublished and deletePublished return Finish's mark of the
	// published rows seqs, as an update or a delete.
	markPublished(seqs []int64, token string, now time.Time) (string, []any)
	deletePublished(seqs []int64, token string) (string, []any)
	// reject returns the update recording one rejection.
	reject(r Rejection, maxAttempts int, token string, now time.Time) (string, []any)
	// cleanup deletes up to limit rows published before cutoff.
	cleanup(cutoff time.Time, limit int) (string, []any)
	// counts returns the query of Store.Counts.
	counts(now time.Time) (string, []any)
	// backlog returns the query of Store.Backlog.
	backlog(now time.Time) (string, []any)
	// listPending returns the list_pending query with the filter f.
	listPending(f PendingFilter) (string, []any)
	// withIDs returns q, a statement on the rows seqs, with its arguments.
	withIDs(q string, seqs []int64) (string, []any)
	// newTime returns a scan destination for a timestamp column.
	newTime() timeCol
	// newNullTime returns a scan destination for a timestamp column that
	// may be NULL (the zero time).
	newNullTime() timeCol
	// newInt returns a scan destination for an integer column.
	newInt() intCol
	// timeArg returns t as a timestamp column's bind value (t is UTC).
	timeArg(t time.Time) any
}

// queries are the statements of every dialect, rendered for one table.
// A dialect's SQL file has one "-- name: x" section for each, plus its own.
type queries struct {
	claim, markPublished, deletePublished, reject, cleanup, counts string
	listDead, redrive, redriveAll, discard, discardAll, deadIDs    string
	// listDeadBrief is listDead with its text columns cut (BriefChars).
	listDeadBrief string
	// listPending lists undelivered rows, for txboxtest (see ListPending).
	listPending string
	// backlog is the relay's sample; backlogTopics inspect's topics.
	backlog, backlogTopics string
	// insert has a {{list}} of one row's values; insertAt sets
	// next_attempt_at too (Row.DeliverAt).
	insert, insertAt string
	// cancelFind, cancel and cancelState are Inserter.Cancel's.
	cancelFind, cancel, cancelState string
	// release ends a lease on every row that holds it and releaseSeqs
	// on the rows named (SQLite); lazyCommit runs before the commit of
	// marks without ordering keys (PostgreSQL); lockKeys takes the
	// key-order locks of a multi-row insert (MySQL). Empty elsewhere.
	release, releaseSeqs, lazyCommit, lockKeys string
	// claimTimeout bounds the claim transaction's idle time (PostgreSQL).
	claimTimeout string
}

// load renders file's sections into q and extra, with the template
// functions of table (quoted, as NewStore takes it) and {{list}}.
func (q *queries) load(d txboxdriver.Dialect, file, table string, extra map[string]*string) error {
	dest := map[string]*string{
		"claim": &q.claim, "mark_published": &q.markPublished, "delete_published": &q.deletePublished,
		"reject": &q.reject, "cleanup": &q.cleanup, "counts": &q.counts, "list_dead": &q.listDead, "list_dead_brief": &q.listDeadBrief,
		"redrive": &q.redrive, "redrive_all": &q.redriveAll, "discard": &q.discard, "discard_all": &q.discardAll,
		"dead_ids": &q.deadIDs, "insert": &q.insert, "insert_at": &q.insertAt, "cancel_find": &q.cancelFind, "cancel": &q.cancel, "cancel_state": &q.cancelState, "list_pending": &q.listPending, "backlog": &q.backlog,
		"backlog_topics": &q.backlogTopics,
	}
	schema, name := unqualify(table)
	funcs := sqltext.Names(d, schema, name)
	funcs["list"] = listFunc
	funcs["clip"] = func() int { return BriefChars }
	return sqltext.Load("outbox/"+string(d), file, funcs, dest, extra)
}

// newDialect returns the SQL of dialect d for the quoted table.
func newDialect(d txboxdriver.Dialect, table string) (dialect, error) {
	switch d {
	case txboxdriver.Postgres:
		return newPostgres(table)
	case txboxdriver.SQLite:
		return newSQLite(table)
	case txboxdriver.MySQL:
		return newMySQL(table)
	}
	return nil, fmt.Errorf("txbox: no outbox SQL for dialect %q", d)
}

// unqualify splits a quoted, possibly schema-qualified table name
// (validated identifiers, so neither part holds quotes or dots).
func unqualify(quoted string) (schema, table string) {
	unquote := func(s string) string { return strings.Trim(s, "`\"") }
	if s, t, ok := strings.Cut(quoted, "."); ok {
		return unquote(s), unquote(t)
	}
	return "", unquote(quoted)
}

// listMark delimits the item of a {{list "item"}} in a rendered statement.
const listMark = "\x00"

// listFunc is the template function {{list "item"}}: item repeated, comma
// separated, once per element of a list bound at run time (see
// expandList). Each ? in item is one bind parameter.
func listFunc(item string) string { return listMark + item + listMark }

// expandList returns q with each {{list}} repeated n times, its ?s becoming
// d's placeholders numbered from 1 across the lists: the lists hold all of
// their statement's numbered bind parameters.
func expandList(d dialect, q string, n int) string {
	var b strings.Builder
	b.Grow(len(q) + n*64)
	p := 1
	for {
		head, rest, found := strings.Cut(q, listMark)
		b.WriteString(head)
		if !found {
			return b.String()
		}
		var item string
		item, q, _ = strings.Cut(rest, listMark)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			for j := 0; j < len(item); j++ {
				if item[j] != '?' {
					b.WriteByte(item[j])
					continue
				}
				b.WriteString(d.placeholder(p))
				p++
			}
		}
	}
}

// timeCol is a reusable scan destination for one timestamp column. err
// reports a value that is not a time (SQLite's columns take any type):
// the row, not the whole claim, is then invalid.
type timeCol interface {
	dest() any
	time() time.Time
	err() error
}

// intCol is a reusable scan destination for one integer column; err as
// timeCol's.
type intCol interface {
	dest() any
	int() int
	err() error
}

// nativeInt scans a column the database guarantees to be an integer.
type nativeInt struct{ n int }

func (i *nativeInt) dest() any  { return &i.n }
func (i *nativeInt) int() int   { return i.n }
func (i *nativeInt) err() error { return nil }

// dynamicInt scans an SQLite integer column, whatever a plain-SQL writer
// stored in it.
type dynamicInt struct {
	n   int64
	bad error
}

func (i *dynamicInt) dest() any  { return i }
func (i *dynamicInt) int() int   { return int(i.n) }
func (i *dynamicInt) err() error { return i.bad }

func (i *dynamicInt) Scan(v any) error {
	i.n, i.bad = 0, nil
	switch x := v.(type) {
	case int64:
		i.n = x
	case nil:
		i.bad = errors.New("is NULL")
	default:
		i.bad = fmt.Errorf("holds %s, not an integer", describe(v))
	}
	return nil
}

// describe names a value a plain-SQL writer stored, briefly and safely:
// text is cut to its first 40 bytes before it is quoted (a quoted rune
// can take ten bytes, so cutting after quoting would not bound it).
func describe(v any) string {
	switch x := v.(type) {
	case []byte:
		return quoteShort(string(x))
	case string:
		return quoteShort(x)
	}
	return fmt.Sprintf("%T %v", v, v)
}

func quoteShort(s string) string {
	const max = 40
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", s[:max])
}

// nativeTime scans a timestamp that the driver returns as a time.Time.
type nativeTime struct{ t time.Time }

func (t *nativeTime) dest() any       { return &t.t }
func (t *nativeTime) time() time.Time { return t.t }
func (t *nativeTime) err() error      { return nil }

// nullNativeTime scans a timestamp that may be NULL, which the driver
// returns as a time.Time.
type nullNativeTime struct{ t *time.Time }

func (t *nullNativeTime) dest() any  { return &t.t }
func (t *nullNativeTime) err() error { return nil }
func (t *nullNativeTime) time() time.Time {
	if t.t == nil {
		return time.Time{}
	}
	return *t.t
}

// nullMicrosTime is microsTime for a column that may be NULL.
type nullMicrosTime struct {
	microsTime
	null bool
}

func (t *nullMicrosTime) dest() any { return t }

func (t *nullMicrosTime) Scan(v any) error {
	t.null = v == nil
	if t.null {
		t.us = dynamicInt{}
		return nil
	}
	return t.us.Scan(v)
}

func (t *nullMicrosTime) time() time.Time {
	if t.null {
		return time.Time{}
	}
	return t.microsTime.time()
}

// microsTime scans a timestamp stored as Unix microseconds (SQLite),
// whatever a plain-SQL writer stored instead.
type microsTime struct{ us dynamicInt }

func (t *microsTime) dest() any       { return &t.us }
func (t *microsTime) time() time.Time { return time.UnixMicro(t.us.n) }
func (t *microsTime) err() error      { return t.us.bad }

// anyTime scans a timestamp whether the driver returns a time.Time or text
// (go-sql-driver/mysql without parseTime=true returns DATETIME as bytes).
type anyTime struct{ time.Time }

func (t *anyTime) dest() any       { return t }
func (t *anyTime) time() time.Time { return t.Time }
func (t *anyTime) err() error      { return nil }

func (t *anyTime) Scan(v any) error {
	switch x := v.(type) {
	case time.Time:
		t.Time = x
		return nil
	case nil:
		t.Time = time.Time{}
		return nil
	case []byte:
		return t.parse(string(x))
	case string:
		return t.parse(x)
	}
	return fmt.Errorf("txbox: cannot scan %T as a time", v)
}

func (t *anyTime) parse(s string) error {
	p, err := time.ParseInLocation("2006-01-02 15:04:05.999999", s, time.UTC)
	if err != nil {
		return fmt.Errorf("txbox: cannot parse time %q: %w", s, err)
	}
	t.Time = p
	return nil
}
