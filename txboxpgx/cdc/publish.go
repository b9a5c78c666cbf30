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
	acked    bool // the broker acknowledged it
	dead     bool // recorded dead in the table
}

func (e *entry) settled() bool { return e.row == nil || e.acked || e.dead }

// publishLoop publishes the transactions of pipe in commit order, in
// batches of at most BatchSize messages, one batch at a time, and stores
// in acked the end LSN of the last transaction whose rows are all settled
// (acknowledged by the broker, or recorded dead) together with every one
// before it: the contiguous watermark the receiver confirms.
//
// A batch goes out in waves, as the polling relay's runs do: a wave holds
// every unkeyed message and, of each key, its first message not yet
// acknowledged; the next wave holds the next message of each key whose
// message the broker acknowledged in the wave before. A key whose message
// failed sends nothing more until that message is acknowledged, so no
// message reaches the broker before an earlier one of its key. What the
// broker acknowledged is not sent again, unless the relay stops before the
// watermark passes it. A rejection counts an attempt and waits
// RetryDelay, doubling; after MaxAttempts the row is recorded dead in the
// table and passed over. An outage or timeout counts nothing and waits a
// doubling backoff up to BackoffMax.
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
		batch := queue[:min(len(queue), r.cfg.BatchSize)]
		// Rows that break the contract, or that the broker could never
		// take, are dead at once: they cost no broker call.
		for i := range batch {
			e := &batch[i]
			if e.settled() {
				continue
			}
			if e.row.invalid == nil && checker != nil {
				e.row.invalid = checker.CheckMessage(e.row.msg)
			}
			if e.row.invalid != nil {
				if err := r.recordDead(ctx, e.row, e.row.invalid, e.attempts, txbox.OutcomeInvalid); err != nil {
					return nil // ctx ended
				}
				e.dead = true
			}
		}
		// Waves.
		var failed error
		failedAt := -1
		held := map[string]bool{} // keys with a failed message in this batch
		for {
			var msgs []txbox.Message
			var at []int
			inWave := map[string]bool{}
			for i := range batch {
				e := &batch[i]
				if e.settled() {
					continue
				}
				if k := e.row.msg.Key; k != "" {
					if held[k] || inWave[k] {
						inWave[k] = true
						continue
					}
					inWave[k] = true
				}
				msgs = append(msgs, e.row.msg)
				at = append(at, i)
			}
			if len(msgs) == 0 {
				break
			}
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
			began := time.Now()
			errs := r.pub.Publish(pctx, msgs)
			cancel()
			nfailed := 0
			for j, i := range at {
				e := &batch[i]
				var err error
				if errs != nil {
					err = errs[j]
				}
				if err == nil {
					e.acked = true
					continue
				}
				nfailed++
				if k := e.row.msg.Key; k != "" {
					held[k] = true
				}
				if failedAt < 0 || i < failedAt {
					failedAt, failed = i, err
				}
				if errors.Is(err, txbox.ErrRejected) {
					e.attempts++
					if e.attempts >= r.cfg.MaxAttempts {
						if err := r.recordDead(ctx, e.row, err, e.attempts, txbox.OutcomeDead); err != nil {
							return nil // ctx ended
						}
						e.dead = true
					} else if o := r.cfg.Observer; o != nil {
						o.Settled(e.row.msg.Topic, txbox.OutcomeRejected, time.Since(e.row.msg.CreatedAt))
					}
				}
			}
			if o := r.cfg.Observer; o != nil {
				o.Published(len(msgs), nfailed, time.Since(began))
			}
			if nfailed == len(msgs) {
				break // nothing went through: no wave behind it either
			}
		}
		settled := 0
		for settled < len(batch) && batch[settled].settled() {
			settled++
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
		if batch[failedAt].dead {
			continue // its last rejection: the others go on at once
		}
		var pause time.Duration
		if errors.Is(failed, txbox.ErrRejected) {
			e := batch[failedAt]
			pause = min(r.cfg.RetryDelay<<min(max(e.attempts-1, 0), 20), r.cfg.BackoffMax)
			r.log.Warn("broker rejected a message; retrying it, its key's later messages wait", "id", e.row.msg.ID, "attempt", e.attempts, "in", pause, "err", failed)
		} else {
			wait = backoff.Next(wait, 100*time.Millisecond, r.cfg.BackoffMax)
			pause = wait
			r.log.Warn("publish failed; retrying the unacknowledged messages", "in", pause, "err", failed)
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
		if e.row != nil && e.acked {
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
