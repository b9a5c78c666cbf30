package outboxsql

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/postgres.sql
var postgresSQL string

// postgres is the outbox's SQL on PostgreSQL: row locks held in the claim
// transaction, ids bound as one array, timestamps as time.Time.
type postgres struct {
	q queries
	// markLazy and deleteLazy are markPublished and deletePublished with
	// lazy_commit folded in (see lazyMarker).
	markLazy, deleteLazy string
	// tableHealth is Store.Health's statement.
	tableHealth string
}

var _ dialect = (*postgres)(nil)

func newPostgres(table string) (*postgres, error) {
	p := &postgres{}
	err := p.q.load(txboxdriver.Postgres, postgresSQL, table, map[string]*string{
		"lazy_commit": &p.q.lazyCommit, "claim_timeout": &p.q.claimTimeout,
		"mark_published_lazy": &p.markLazy, "delete_published_lazy": &p.deleteLazy,
		"table_health": &p.tableHealth,
	})
	return p, err
}

func (p *postgres) queries() *queries { return &p.q }

func (p *postgres) placeholder(n int) string { return "$" + strconv.Itoa(n) }

// beginClaim begins the claim transaction and tells the server to end it
// (closing the session, releasing the row locks) once it has sat idle for
// lease: the relay is idle in it only while it waits for the broker, at
// most PublishTimeout, which the lease exceeds. A relay whose side of the
// connection vanished (a half-closed connection, a host gone, a proxy that
// dropped the client) would otherwise hold the locks until the server's TCP
// keepalives fire, about two hours by default, or never when a proxy keeps
// the server's side open.
func (p *postgres) beginClaim(ctx context.Context, pool txboxdriver.Pool, lease time.Duration) (txboxdriver.Tx, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	for _, st := range p.claimSetup(lease) {
		if _, err := tx.Exec(ctx, st.SQL, st.Args...); err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("claim transaction: idle timeout: %w", err)
		}
	}
	return tx, nil
}

var _ pipelinedClaim = (*postgres)(nil)

// claimSetup is what beginClaim runs after BEGIN: the claim_timeout
// settings, nothing when lease is 0.
func (p *postgres) claimSetup(lease time.Duration) []txboxdriver.Statement {
	if lease <= 0 {
		return nil
	}
	return []txboxdriver.Statement{{SQL: p.q.claimTimeout, Args: []any{leaseMillis(lease)}}}
}

// leaseMillis is lease in whole milliseconds, at least 1, as the text that
// idle_in_transaction_session_timeout takes.
func leaseMillis(lease time.Duration) string {
	return strconv.FormatInt(max(lease.Milliseconds(), 1), 10)
}

func (p *postgres) claim(limit int, from int64, _ string, _, _ time.Time) (string, []any) {
	return p.q.claim, []any{limit, from}
}

func (p *postgres) markPublished(seqs []int64, _ string, _ time.Time) (string, []any) {
	return p.withIDs(p.q.markPublished, seqs)
}

func (p *postgres) deletePublished(seqs []int64, _ string) (string, []any) {
	return p.withIDs(p.q.deletePublished, seqs)
}

func (p *postgres) reject(r Rejection, maxAttempts int, _ string, _ time.Time) (string, []any) {
	return p.q.reject, []any{r.Seq, r.Err, r.RetryAfter.Milliseconds(), maxAttempts}
}

func (p *postgres) cleanup(cutoff time.Time, limit int) (string, []any) {
	return p.q.cleanup, []any{cutoff, limit}
}

func (p *postgres) counts(time.Time) (string, []any) { return p.q.counts, nil }

func (p *postgres) withIDs(q string, seqs []int64) (string, []any) { return q, []any{seqs} }

func (p *postgres) newTime() timeCol { return &nativeTime{} }
func (p *postgres) newInt() intCol   { return &nativeInt{} }

func (p *postgres) backlog(time.Time) (string, []any) { return p.q.backlog, nil }

func (p *postgres) newNullTime() timeCol { return &nullNativeTime{} }

func (p *postgres) listPending(f PendingFilter) (string, []any) {
	return p.q.listPending, []any{f.Seq, f.Topic, f.Key, f.MinAttempts, f.Dead, f.limit()}
}

// timeArg binds t as a time.Time: timestamptz.
func (p *postgres) timeArg(t time.Time) any { return t }
