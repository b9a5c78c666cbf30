package outboxsql

import (
	"context"
	_ "embed"
	"encoding/json"
	"strconv"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/sqlite.sql
var sqliteSQL string

// sqlite is the outbox's SQL on SQLite: claims are leases (a token stamped
// by one short UPDATE), ids are bound as one JSON array, timestamps are
// Unix microseconds computed here, except the claim's, which SQLite reads
// when the claim runs.
type sqlite struct{ q queries }

var _ dialect = (*sqlite)(nil)

func newSQLite(table string) (*sqlite, error) {
	s := &sqlite{}
	err := s.q.load(txboxdriver.SQLite, sqliteSQL, table, map[string]*string{"release": &s.q.release, "release_seqs": &s.q.releaseSeqs})
	return s, err
}

func (s *sqlite) queries() *queries { return &s.q }

func (s *sqlite) placeholder(n int) string { return "?" + strconv.Itoa(n) }

// beginClaim returns no transaction: SQLite has one writer at a time, so a
// claim must not hold a write transaction while the relay publishes.
func (s *sqlite) beginClaim(context.Context, txboxdriver.Pool, time.Duration) (txboxdriver.Tx, error) {
	return nil, nil
}

// claim stamps the lease from SQLite's clock when the statement runs (see
// the query), so it takes the lease's length, until - now.
func (s *sqlite) claim(limit int, from int64, token string, until, now time.Time) (string, []any) {
	return s.q.claim, []any{token, until.Sub(now).Microseconds(), limit, from}
}

func (s *sqlite) markPublished(seqs []int64, token string, now time.Time) (string, []any) {
	return s.q.markPublished, []any{now.UnixMicro(), token, idsJSON(seqs)}
}

func (s *sqlite) deletePublished(seqs []int64, token string) (string, []any) {
	return s.q.deletePublished, []any{token, idsJSON(seqs)}
}

func (s *sqlite) reject(r Rejection, maxAttempts int, token string, now time.Time) (string, []any) {
	return s.q.reject, []any{r.Seq, r.Err, now.Add(r.RetryAfter).UnixMicro(), maxAttempts, now.UnixMicro(), token}
}

func (s *sqlite) cleanup(cutoff time.Time, limit int) (string, []any) {
	return s.q.cleanup, []any{cutoff.UnixMicro(), limit}
}

func (s *sqlite) counts(now time.Time) (string, []any) {
	return s.q.counts, []any{now.UnixMicro()}
}

func (s *sqlite) withIDs(q string, seqs []int64) (string, []any) { return q, []any{idsJSON(seqs)} }

func (s *sqlite) newTime() timeCol { return &microsTime{} }
func (s *sqlite) newInt() intCol   { return &dynamicInt{} }

// idsJSON is seqs as the JSON array that json_each reads.
func idsJSON(seqs []int64) string {
	b, _ := json.Marshal(seqs)
	return string(b)
}

func (s *sqlite) backlog(now time.Time) (string, []any) {
	return s.q.backlog, []any{now.UnixMicro()}
}

func (s *sqlite) newNullTime() timeCol { return &nullMicrosTime{} }

func (s *sqlite) listPending(f PendingFilter) (string, []any) {
	return s.q.listPending, []any{f.Seq, f.Topic, f.Key, f.MinAttempts, f.Dead, f.limit()}
}

// timeArg binds t as Unix microseconds.
func (s *sqlite) timeArg(t time.Time) any { return t.UnixMicro() }
