package relay

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/relayseam"
)

// errFinish marks a round that failed recording its marks (the database),
// as against one whose publish failed.
var errFinish = errors.New("finish batch")

func batchLen(b *outboxsql.Batch) int {
	if b == nil {
		return 0
	}
	return len(b.Rows)
}

func countErrs(errs []error) int {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}

// observeSettled reports each claimed row's outcome once the marks have
// committed: the rows published, the rejections, and the rest as unacked.
func (r *Relay) observeSettled(batch *outboxsql.Batch, out prepared, errs []error, rejected []outboxsql.Rejection) {
	now := time.Now()
	for _, rj := range rejected {
		i, ok := slices.BinarySearchFunc(batch.Rows, rj.Seq, func(c outboxsql.Claimed, seq int64) int { return int(c.Seq - seq) })
		if !ok {
			continue
		}
		row := &batch.Rows[i]
		o := txbox.OutcomeRejected
		switch {
		case rj.Invalid:
			o = txbox.OutcomeInvalid
		case rj.Dead:
			o = txbox.OutcomeDead
		}
		r.obs.Settled(row.Topic, o, now.Sub(row.CreatedAt))
	}
	for i := range out.msgs {
		row := &batch.Rows[out.rowOf[i]]
		var err error
		if errs != nil {
			err = errs[i]
		}
		switch {
		case errors.Is(err, errHeldBack): // not sent; settled in a later round
		case err == nil:
			r.obs.Settled(row.Topic, txbox.OutcomePublished, now.Sub(row.CreatedAt))
		case !isRejectedSeq(rejected, row.Seq): // rejections are reported above
			r.obs.Settled(row.Topic, txbox.OutcomeUnacked, now.Sub(row.CreatedAt))
		}
	}
}

func isRejectedSeq(rs []outboxsql.Rejection, seq int64) bool {
	for _, r := range rs {
		if r.Seq == seq {
			return true
		}
	}
	return false
}

// inFlight holds the claim times of the batches a relay holds, for the
// sample's oldest in-flight age. Only a relay with an observer keeps it.
type inFlight struct {
	mu    sync.Mutex
	times []time.Time
}

// add records a batch claimed at t and returns the func that forgets it;
// calls after the first do nothing.
func (f *inFlight) add(t time.Time) func() {
	f.mu.Lock()
	f.times = append(f.times, t)
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if i := slices.Index(f.times, t); i >= 0 {
				f.times[i] = f.times[len(f.times)-1]
				f.times = f.times[:len(f.times)-1]
			}
		})
	}
}

func (f *inFlight) oldest(now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var age time.Duration
	for _, t := range f.times {
		age = max(age, now.Sub(t))
	}
	return age
}

// sample reads the table's backlog (one query) and the relay's state. When
// the table cannot be read, the sample carries the error and the table
// figures of prev. A relay with an Observer calls it every SampleInterval
// and hands the result to Observer.Sampled; txboxui reads it through
// internal/relayseam.
func (r *Relay) sample(ctx context.Context, prev txbox.RelaySample) txbox.RelaySample {
	s := prev
	s.At = time.Now()
	s.Err = nil
	qctx, cancel := context.WithTimeout(ctx, max(r.cfg.test.SampleInterval, time.Second))
	b, err := r.store.Backlog(qctx)
	cancel()
	if err != nil {
		s.Err = err
	} else {
		s.Pending, s.Retrying, s.Parked, s.Dead, s.OldestClaimableAge = b.Pending, b.Retrying, b.Parked, b.Dead, b.OldestClaimableAge
	}
	r.sampleUpkeep(ctx, &s)
	// Read after the backlog query: a round forgets its batch before it
	// marks it (Relay.round), so a batch whose marks the query saw is
	// never counted as in flight.
	s.OldestInFlightAge = r.inFlight.oldest(s.At)
	s.Listening = r.listening()
	s.BrokerConnected = r.brokerConnected()
	s.BrokerDuplicates = r.duplicates()
	return s
}

// sampleUpkeep reads, on PostgreSQL, the table's dead row versions and the
// age of the database's oldest open transaction into s. Where it cannot be
// read it says so once, at warn, and s.Upkeep is false.
func (r *Relay) sampleUpkeep(ctx context.Context, s *txbox.RelaySample) {
	if !r.store.CanReadHealth() {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, max(r.cfg.test.SampleInterval, time.Second))
	h, err := r.store.Health(qctx)
	cancel()
	s.Upkeep = err == nil
	if err != nil {
		if ctx.Err() == nil && r.upkeepWarned.CompareAndSwap(false, true) {
			r.log.Warn("txbox relay: cannot read the table's upkeep (dead row versions, oldest snapshot); its metrics stay absent", "err", err)
		}
		return
	}
	s.DeadRows, s.OldestTransactionAge = h.DeadRows, h.OldestTransaction
}

func (r *Relay) brokerConnected() bool {
	if c, ok := r.pub.(txbox.ConnectionChecker); ok {
		return c.Connected()
	}
	return true
}

func init() {
	relayseam.Sample = func(ctx context.Context, r any) any {
		return r.(*Relay).sample(ctx, txbox.RelaySample{})
	}
	relayseam.CountersOf = func(r any) relayseam.Counters {
		rl := r.(*Relay)
		return relayseam.Counters{Published: rl.published.Load(), Rejected: rl.rejected.Load(), Dead: rl.dead.Load(),
			Rounds: rl.rounds.Load(), FailedRounds: rl.failedRounds.Load()}
	}
}
