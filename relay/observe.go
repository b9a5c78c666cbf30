package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
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

// Sample reads the table's backlog (one query) and the relay's state. When
// the table cannot be read, the sample carries the error and the table
// figures of prev. A relay with an Observer calls it every SampleInterval
// and hands the result to Observer.Sampled.
func (r *Relay) Sample(ctx context.Context, prev txbox.RelaySample) txbox.RelaySample {
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
	s.Listening = r.Listening()
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

// Health is what Ready looks at.
type Health struct {
	Running         bool      // the relay is running (Start or Run)
	DatabaseErr     error     // the database did not answer a ping, or nil
	BrokerConnected bool      // true when the publisher does not report a connection
	LastGoodRound   time.Time // zero before the first
	// Stale is how old LastGoodRound may be in a ready relay:
	// PollInterval + 2 × the claim lease (31s with the defaults).
	Stale time.Duration
	// Listening: LISTEN/NOTIFY wake-ups are active; Notify says the relay
	// tries to have them (PostgreSQL through txboxpgx, not disabled).
	// Polling instead does not make a relay unready.
	Listening, Notify bool
}

// Health pings the database (bounded by ctx) and reads the relay's state.
func (r *Relay) Health(ctx context.Context) Health {
	h := Health{
		Running:         r.running.Load(),
		BrokerConnected: r.brokerConnected(),
		Stale:           r.cfg.PollInterval + 2*r.cfg.test.ClaimLease,
		Listening:       r.Listening(),
		Notify:          r.listen != nil,
	}
	if ns := r.lastGood.Load(); ns != 0 {
		h.LastGoodRound = time.Unix(0, ns)
	}
	h.DatabaseErr = r.store.Ping(ctx)
	return h
}

// Ready returns nil when the relay can deliver: it runs, its database
// answers, its broker connection is up and a round succeeded within
// Health.Stale; else an error naming every reason. A relay whose broker
// connection was closed for good (the zombie of a closed NATS connection)
// is not ready.
func (r *Relay) Ready(ctx context.Context) error {
	h := r.Health(ctx)
	return h.Err(time.Now())
}

// Err returns nil for a ready relay, else the reasons it is not.
func (h Health) Err(now time.Time) error {
	var why []string
	if !h.Running {
		why = append(why, "the relay is not running")
	}
	if h.DatabaseErr != nil {
		why = append(why, "database unreachable: "+h.DatabaseErr.Error())
	}
	if !h.BrokerConnected {
		why = append(why, "broker not connected")
	}
	switch {
	case h.LastGoodRound.IsZero():
		why = append(why, "no round has succeeded yet")
	case now.Sub(h.LastGoodRound) > h.Stale:
		why = append(why, fmt.Sprintf("last good round %s ago (over %s)", now.Sub(h.LastGoodRound).Round(time.Millisecond), h.Stale))
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New("txbox relay not ready: " + strings.Join(why, "; "))
}
