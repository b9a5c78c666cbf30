package outboxsql

import (
	"context"
	"fmt"
	"time"

	"github.com/txbox/txbox/driver"
)

// ClaimArgs are a claim's arguments: Claim's, ClaimReaching's, and, when
// Floors is not nil, ClaimRuns'.
type ClaimArgs struct {
	Limit       int
	From, Reach int64
	Floors      *Floors
}

// CanChain reports whether FinishClaim can mark this batch and claim the
// next one in one round trip: a PostgreSQL claim transaction through a
// driver that has driver.ChainBeginner (txboxpgx).
func (b *Batch) CanChain() bool {
	if _, ok := b.tx.(driver.ChainBeginner); !ok || b.token != "" {
		return false
	}
	_, ok := b.s.d.(pipelinedClaim)
	return ok && b.s.marksLazily()
}

// FinishClaim is Finish of published rows with nothing rejected, followed
// by the next claim, sent at once (see CanChain; elsewhere it is Finish
// alone and next is nil): the mark, COMMIT, BEGIN, the claim's settings
// and the claim. The claim runs after the COMMIT, so it sees the marks: a
// keyed drain's next batch, whose heads are the rows behind this one's,
// costs no round trip of its own. err is the marks' failure, as Finish's;
// when they committed and the claim failed, next is nil and claimErr says
// why.
func (b *Batch) FinishClaim(ctx context.Context, published []int64, a ClaimArgs) (next *Batch, claimErr, err error) {
	if len(published) == 0 || !b.CanChain() {
		return nil, nil, b.Finish(ctx, published, nil, 0)
	}
	s := b.s
	q, args := s.claimStatement(a)
	return b.chain(ctx, published, &Batch{s: s}, s.d.(pipelinedClaim).claimSetup(s.lease), driver.Statement{SQL: q, Args: args}, a.Limit)
}

// chain marks published, commits, and claims into next with setup and
// query, in one round trip (see FinishClaim).
func (b *Batch) chain(ctx context.Context, published []int64, next *Batch, setup []driver.Statement, query driver.Statement, limit int) (*Batch, error, error) {
	msql, margs, _ := b.lazyMark(published)
	committed, tx, rows, err := b.tx.(driver.ChainBeginner).ExecCommitBeginQuery(ctx, driver.Statement{SQL: msql, Args: margs}, driver.TxOptions{}, setup, query)
	if !committed {
		_ = b.tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("mark published and commit: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("claim transaction: %w", err), nil
	}
	next.tx = tx
	next, err = b.s.scanBatch(ctx, next, rows, limit)
	return next, err, nil
}

// FinishClaim is Batch.FinishClaim with a claim from the leased lanes
// (ClaimReaching, or ClaimRuns when floors is not nil) as the next claim;
// on MySQL, or where the batch cannot chain, it is b.Finish alone.
func (l *Lanes) FinishClaim(ctx context.Context, b *Batch, published []int64, limit int, from, reach int64, leases []Lease, floors *Floors) (next *Batch, claimErr, err error) {
	if len(published) == 0 || l.my != nil || !b.CanChain() {
		return nil, nil, b.Finish(ctx, published, nil, 0)
	}
	lock, query := l.statements(limit, from, reach, leases, floors)
	return b.chain(ctx, published, &Batch{s: l.s, Started: time.Now()}, []driver.Statement{lock}, query, limit)
}
