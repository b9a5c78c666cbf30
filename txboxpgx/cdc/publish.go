package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
)

// entry is one row waiting to be settled, in commit order; end is set on
// the last row of its transaction (or on an empty transaction's marker).
type entry struct {
	row      *row // nil: the marker of a transaction without outbox rows
	end      pglogrepl.LSN
	attempts int
}

// publishLoop publishes the transactions of pipe in commit order, in
// batches of at most BatchSize messages, one batch at a time, and stores
// in acked the end LSN of the last transaction whose rows are all settled
// (acknowledged by the broker, or recorded dead): the contiguous watermark
// the receiver confirms.
//
// A batch settles from its start up to its first failed message; that one
// and all after it are published again (those the broker did acknowledge
// go out twice, and the broker drops them by id where it dedupes), so that
// a key's messages reach the broker in commit order. A rejection counts an
// attempt and waits RetryDelay, doubling; after MaxAttempts the row is
// recorded dead in the table and passed over. An outage or timeout counts
// nothing and waits a doubling backoff up to BackoffMax.
func (r *Relay) publishLoop(ctx context.Context, pipe <-chan txn, acked *atomic.Uint64) error {
	var queue []entry
	take := func(t txn) {
		if len(t.rows) == 0 {
			queue = append(queue, entry{end: t.end})
			return
		}
		for i := range t.rows {
			e := entry{row: &t.rows[i]}
			if i == len(t.rows)-1 {
				e.end = t.end
			}
			queue = append(queue, e)
		}
	}
	checker, _ := r.pub.(txbox.MessageChecker)
	var wait time.Duration // backoff after outages
	for {
		if len(queue) == 0 {
			select {
			case t := <-pipe:
				take(t)
			case <-ctx.Done():
				return nil
			}
		}
	more:
		for len(queue) < r.cfg.BatchSize {
			select {
			case t := <-pipe:
				take(t)
			default:
				break more
			}
		}
		n := min(len(queue), r.cfg.BatchSize)
		batch := queue[:n]
		// Rows that break the contract, or that the broker could never
		// take, are dead at once: they cost no broker call.
		var msgs []txbox.Message
		var at []int // batch index of msgs[i]
		for i := range batch {
			rw := batch[i].row
			if rw == nil {
				continue
			}
			if rw.invalid == nil && checker != nil {
				rw.invalid = checker.CheckMessage(rw.msg)
			}
			if rw.invalid != nil {
				continue
			}
			msgs = append(msgs, rw.msg)
			at = append(at, i)
		}
		settled := n // entries of batch settled from its start
		var failed error
		if len(msgs) > 0 {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
			began := time.Now()
			errs := r.pub.Publish(pctx, msgs)
			cancel()
			nfailed := 0
			first := -1
			for j, err := range errs {
				if err != nil {
					nfailed++
					if first < 0 {
						first = j
					}
				}
			}
			if o := r.cfg.Observer; o != nil {
				o.Published(len(msgs), nfailed, time.Since(began))
			}
			if first >= 0 {
				settled, failed = at[first], errs[first]
			}
		}
		// Record the dead rows among the settled ones, in order.
		for i := 0; i < settled; i++ {
			if rw := batch[i].row; rw != nil && rw.invalid != nil {
				if err := r.recordDead(ctx, rw, rw.invalid, batch[i].attempts, txbox.OutcomeInvalid); err != nil {
					settled = i
					failed = err
					break
				}
			}
		}
		if failed != nil && settled < n && errors.Is(failed, txbox.ErrRejected) && batch[settled].row != nil && batch[settled].row.invalid == nil {
			e := &batch[settled]
			e.attempts++
			if e.attempts >= r.cfg.MaxAttempts {
				if err := r.recordDead(ctx, e.row, failed, e.attempts, txbox.OutcomeDead); err == nil {
					r.settle(batch[:settled+1], acked)
					queue = queue[settled+1:]
					continue
				}
			}
		}
		r.settle(batch[:settled], acked)
		queue = queue[settled:]
		if failed == nil {
			wait = 0
			continue
		}
		if errors.Is(failed, txbox.ErrPublisherClosed) {
			return failed
		}
		var pause time.Duration
		if errors.Is(failed, txbox.ErrRejected) {
			pause = min(r.cfg.RetryDelay<<min(queue[0].attempts-1, 20), r.cfg.BackoffMax)
			if o := r.cfg.Observer; o != nil && queue[0].row != nil {
				o.Settled(queue[0].row.msg.Topic, txbox.OutcomeRejected, time.Since(queue[0].row.msg.CreatedAt))
			}
			r.log.Warn("broker rejected a message; retrying it and the ones after it", "id", queue[0].row.msg.ID, "attempt", queue[0].attempts, "in", pause, "err", failed)
		} else {
			wait = backoff.Next(wait, 100*time.Millisecond, r.cfg.BackoffMax)
			pause = wait
			r.log.Warn("publish failed; retrying from the first unacknowledged message", "in", pause, "err", failed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// settle counts the settled entries and moves the watermark to the end of
// the last transaction among them.
func (r *Relay) settle(done []entry, acked *atomic.Uint64) {
	o := r.cfg.Observer
	for _, e := range done {
		if e.row != nil && e.row.invalid == nil {
			r.published.Add(1)
			if e.row.id > r.maxAckedID.Load() {
				r.maxAckedID.Store(e.row.id)
			}
			if o != nil {
				o.Settled(e.row.msg.Topic, txbox.OutcomePublished, time.Since(e.row.msg.CreatedAt))
			}
		}
		if e.end > pglogrepl.LSN(acked.Load()) {
			acked.Store(uint64(e.end))
		}
	}
}

// recordDead marks the row dead in the table, with the error, as the
// polling relay does (txbox dead lists, redrives and discards it). It
// retries while the database is unreachable, until ctx ends.
func (r *Relay) recordDead(ctx context.Context, rw *row, cause error, attempts int, outcome txbox.Outcome) error {
	var wait time.Duration
	for {
		_, err := r.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET dead_at = now(), last_error = $2, attempts = $3 WHERE id = $1 AND dead_at IS NULL`, r.n.table),
			rw.id, cause.Error(), attempts)
		if err == nil {
			r.dead.Add(1)
			rw.invalid = cause // settled as not published
			if o := r.cfg.Observer; o != nil {
				o.Settled(rw.msg.Topic, outcome, time.Since(rw.msg.CreatedAt))
			}
			r.log.Warn("message recorded dead", "id", rw.msg.ID, "row", rw.id, "err", cause)
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		wait = backoff.Next(wait, 100*time.Millisecond, r.cfg.BackoffMax)
		r.log.Warn("recording a dead message failed; retrying", "id", rw.msg.ID, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
