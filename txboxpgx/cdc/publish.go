package cdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/internal/roundtimes"
)

// entry is one row waiting to be settled, in commit order; end is set on
// the last row of its transaction (or on an empty transaction's marker).
type entry struct {
	row      *row // nil: the marker of a transaction without outbox rows
	end      pglogrepl.LSN
	attempts int
	retryAt  time.Time // after a rejection: its key is parked until then
	sending  bool      // in a publish whose answer has not come yet
	checked  bool      // the publisher's MessageChecker has seen it
	acked    bool      // the broker acknowledged it
	dead     bool      // recorded dead in the table
	times    *txnTimes // its transaction's stream times (batches recorded), or nil
}

func (e *entry) settled() bool { return e.row == nil || e.acked || e.dead }

// publishesInFlight is how many publishes the relay has in flight at
// once: the next batch goes out while the broker acknowledges the last.
const publishesInFlight = 4

// wave is one publish: its messages and their entries' sequence numbers.
type wave struct {
	msgs  []txbox.Message
	seqs  []int64
	began time.Time
	errs  []error
	acked time.Time
	// beside: the other publishes in flight when it began.
	beside int
}

// publishLoop publishes the transactions of pipe, each key in commit
// order, and stores in acked the end LSN of the last transaction whose
// rows are all settled (acknowledged by the broker, or recorded dead)
// together with every one before it: the contiguous watermark the
// receiver confirms.
//
// It holds up to MaxPending unsettled rows and sends them in waves of at
// most BatchSize messages, up to publishesInFlight waves at once: a wave
// holds every unkeyed message not yet sent and, of each key, its first
// message not yet settled, unless that message is in a wave in flight or
// waits for its retry; so no message reaches the broker before an
// earlier one of its key has been acknowledged. A rejection counts an
// attempt and parks the message's key for RetryDelay, doubling per
// attempt up to BackoffMax; the other keys flow meanwhile, and after
// MaxAttempts the row is recorded dead in the table and its key goes on.
// An outage or timeout counts nothing: every key waits a doubling backoff
// up to BackoffMax. The watermark stays at a parked row until it settles;
// when MaxPending rows are held, the relay stops reading the stream until
// the oldest settle. When ctx ends, or a publish finds the publisher
// closed for good (txbox.ErrPublisherClosed, which it then returns), it
// sends nothing more, waits for the answers of the waves in flight,
// settling them (acknowledged, or recorded dead), and stores the
// watermark they make.
func (r *Relay) publishLoop(ctx context.Context, pipe <-chan txn, acked *atomic.Uint64) error {
	var queue []entry
	var base int64 // the sequence number of queue[0]
	pending := 0   // rows in queue not yet settled
	take := func(t txn) {
		if len(t.rows) == 0 {
			queue = append(queue, entry{end: t.end})
			return
		}
		for i := range t.rows {
			e := entry{row: &t.rows[i], times: t.times}
			if i == len(t.rows)-1 {
				e.end = t.end
			}
			queue = append(queue, e)
			pending++
		}
	}
	checker, _ := r.pub.(txbox.MessageChecker)
	recorder, _ := r.cfg.Observer.(roundtimes.BatchRecorder)
	var wait time.Duration // backoff after outages
	var outageUntil time.Time
	answers := make(chan *wave, publishesInFlight) // never blocks a publish
	inFlight := 0
	// closed is the error of a publish that found the publisher closed for
	// good: the loop sends nothing more, settles the answers of the waves
	// still in flight and returns it.
	var closed error
	// answer settles what a wave's publish answered.
	answer := func(w *wave) {
		inFlight--
		nfailed := 0
		var outage error
		var b roundtimes.Batch
		for j, seq := range w.seqs {
			e := &queue[seq-base]
			e.sending = false
			var err error
			if w.errs != nil {
				err = w.errs[j]
			}
			if err == nil {
				e.acked = true
				pending--
				r.published.Add(1)
				if o := r.cfg.Observer; o != nil {
					o.Settled(e.row.msg.Topic, txbox.OutcomePublished, time.Since(e.row.msg.CreatedAt))
				}
				if recorder != nil && e.times != nil {
					b.IDs = append(b.IDs, e.row.msg.ID)
					b.Commit = append(b.Commit, e.times.commit)
					b.Sent = append(b.Sent, e.times.sent)
					b.Received = append(b.Received, e.times.received)
				}
				continue
			}
			nfailed++
			if errors.Is(err, txbox.ErrPublisherClosed) {
				if closed == nil {
					closed = err
				}
				continue // unsettled: a later relay publishes it
			}
			if !errors.Is(err, txbox.ErrRejected) {
				if outage == nil {
					outage = err
				}
				continue
			}
			e.attempts++
			if e.attempts >= r.cfg.MaxAttempts {
				if err := r.recordDead(ctx, e.row, err, e.attempts, txbox.OutcomeDead); err != nil {
					continue // ctx ended: the row stays unsettled
				}
				e.dead = true
				pending--
				continue
			}
			pause := min(r.cfg.RetryDelay<<min(e.attempts-1, 20), r.cfg.BackoffMax)
			e.retryAt = time.Now().Add(pause)
			if o := r.cfg.Observer; o != nil {
				o.Settled(e.row.msg.Topic, txbox.OutcomeRejected, time.Since(e.row.msg.CreatedAt))
			}
			r.log.Warn("broker rejected a message; its key is parked until its retry, the other keys go on",
				"id", e.row.msg.ID, "key", e.row.msg.Key, "attempt", e.attempts, "in", pause, "err", err)
		}
		if o := r.cfg.Observer; o != nil {
			o.Published(len(w.msgs), nfailed, w.acked.Sub(w.began))
		}
		if recorder != nil && len(b.IDs) > 0 {
			b.Publish, b.Acked, b.Beside = w.began, w.acked, w.beside
			recorder.RelayBatch(b)
		}
		if outage == nil {
			if nfailed == 0 {
				wait = 0
			}
			return
		}
		if time.Now().Before(outageUntil) {
			return // a wave sent beside the one that met the outage first
		}
		wait = backoff.Next(wait, 100*time.Millisecond, r.cfg.BackoffMax)
		outageUntil = time.Now().Add(wait)
		r.log.Warn("publish failed; retrying the unacknowledged messages", "in", wait, "err", outage)
	}
	// advance moves the watermark over the settled rows at the head.
	advance := func() {
		head := 0
		for head < len(queue) && queue[head].settled() {
			head++
		}
		if head > 0 {
			r.settle(queue[:head], acked)
			queue = queue[head:]
			base += int64(head)
		}
		var oldest int64
		if len(queue) > 0 && queue[0].row != nil {
			oldest = queue[0].row.msg.CreatedAt.UnixNano()
		}
		r.oldestHeld.Store(oldest)
	}
	for {
	answered:
		for inFlight > 0 {
			select {
			case w := <-answers:
				answer(w)
			default:
				break answered
			}
		}
		advance()
		if ctx.Err() != nil || closed != nil {
			// Send nothing more; settle what is in flight, so that the
			// watermark and the dead letters hold every answer.
			for inFlight > 0 {
				answer(<-answers)
			}
			advance()
			return closed
		}
		// Take what the receiver has, up to MaxPending.
	more:
		for pending < r.cfg.MaxPending {
			select {
			case t := <-pipe:
				take(t)
			default:
				break more
			}
		}
		now := time.Now()
		var w *wave
		var nextRetry time.Time
		switch {
		case inFlight >= publishesInFlight:
		case now.Before(outageUntil):
			nextRetry = outageUntil
		default:
			w = &wave{}
			seen := map[string]bool{}
			for i := range queue {
				if len(w.msgs) >= r.cfg.BatchSize {
					break
				}
				e := &queue[i]
				if e.settled() {
					continue
				}
				if k := e.row.msg.Key; k != "" && seen[k] {
					continue
				}
				if e.sending {
					if k := e.row.msg.Key; k != "" {
						seen[k] = true
					}
					continue
				}
				if !e.checked {
					e.checked = true
					if e.row.invalid == nil && checker != nil {
						e.row.invalid = checker.CheckMessage(e.row.msg)
					}
				}
				if e.row.invalid != nil {
					// It breaks the contract, or the broker could never
					// take it: dead at once, no broker call.
					if err := r.recordDead(ctx, e.row, e.row.invalid, e.attempts, txbox.OutcomeInvalid); err != nil {
						break // ctx ended
					}
					e.dead = true
					pending--
					continue
				}
				if k := e.row.msg.Key; k != "" {
					seen[k] = true
				}
				if e.retryAt.After(now) {
					if nextRetry.IsZero() || e.retryAt.Before(nextRetry) {
						nextRetry = e.retryAt
					}
					continue
				}
				w.msgs = append(w.msgs, e.row.msg)
				w.seqs = append(w.seqs, base+int64(i))
			}
		}
		if w != nil && len(w.msgs) > 0 {
			for _, seq := range w.seqs {
				queue[seq-base].sending = true
			}
			w.beside = inFlight
			inFlight++
			go func(w *wave) {
				pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
				w.began = time.Now()
				w.errs = r.pub.Publish(pctx, w.msgs)
				w.acked = time.Now()
				cancel()
				answers <- w
			}(w)
			continue
		}
		// Nothing to send now: wait for rows, an answer, a retry, or the end.
		var in <-chan txn
		if pending < r.cfg.MaxPending {
			in = pipe
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if !nextRetry.IsZero() {
			timer = time.NewTimer(time.Until(nextRetry))
			fire = timer.C
		}
		select {
		case t := <-in:
			take(t)
		case w := <-answers:
			answer(w)
		case <-fire:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// settle moves the watermark to the end of the last transaction among
// done, settled rows at the head of the queue, and the highest id that
// cleanup may delete to the highest acknowledged among them.
func (r *Relay) settle(done []entry, acked *atomic.Uint64) {
	for _, e := range done {
		if e.row != nil && e.acked && e.row.id > r.maxAckedID.Load() {
			r.maxAckedID.Store(e.row.id)
		}
		if e.end > pglogrepl.LSN(acked.Load()) {
			acked.Store(uint64(e.end))
		}
	}
}

// recordDead marks the row dead in the table, with the error, as the
// polling relay does (txbox dead lists, redrives and discards it); a
// message of message mode (no row) is inserted into the table as a dead
// row, once per message id. It retries while the database is unreachable,
// until ctx ends. A row that was dead already (a replay after a restart
// of what an earlier session recorded dead before it confirmed past it),
// or is gone (discarded), is settled all the same, but is counted and
// told to the Observer only by the call that recorded it.
func (r *Relay) recordDead(ctx context.Context, rw *row, cause error, attempts int, outcome txbox.Outcome) error {
	var wait time.Duration
	for {
		var n int64
		var err error
		if rw.id != 0 {
			var tag pgconn.CommandTag
			tag, err = r.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET dead_at = now(), last_error = $2, attempts = $3 WHERE id = $1 AND dead_at IS NULL`, r.n.table),
				rw.id, cause.Error(), attempts)
			n = tag.RowsAffected()
		} else {
			n, err = r.insertDead(ctx, rw, cause, attempts)
		}
		if err == nil && n == 0 {
			r.log.Info("message already recorded dead; passed over", "id", rw.msg.ID, "row", rw.id, "err", cause)
			return nil
		}
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

// Redriven publishes the rows that were recorded dead and then redriven
// (`txbox dead redrive` clears dead_at and keeps last_error; an UPDATE
// is not in the insert-only stream): rows with last_error, no dead_at and
// no published_at, in id order, each key's rows one after another, the
// first of a key that fails holding the rest of its key. A row the broker
// acknowledges gets published_at; a rejected one is recorded dead again
// (its attempt count goes on); an outage leaves the rest for the next
// call. It returns how many it published.
func (r *Relay) Redriven(ctx context.Context) (int, error) {
	rows, err := r.pool.Query(ctx, fmt.Sprintf(`SELECT id, message_id, topic, coalesce(ordering_key, ''), payload,
	    coalesce(headers::text, ''), created_at, attempts FROM %s
	    WHERE last_error IS NOT NULL AND dead_at IS NULL AND published_at IS NULL ORDER BY id LIMIT %d`, r.n.table, r.cfg.BatchSize))
	if err != nil {
		return 0, err
	}
	type redriven struct {
		row
		attempts int
	}
	var all []redriven
	for rows.Next() {
		var rw redriven
		var hj string
		if err := rows.Scan(&rw.id, &rw.msg.ID, &rw.msg.Topic, &rw.msg.Key, &rw.msg.Payload, &hj, &rw.msg.CreatedAt, &rw.attempts); err != nil {
			rows.Close()
			return 0, err
		}
		if hj != "" {
			if err := json.Unmarshal([]byte(hj), &rw.msg.Headers); err != nil {
				rw.invalid = &txbox.InvalidMessageError{ID: rw.msg.ID, Field: "headers", Reason: "is not a JSON object of strings: " + err.Error()}
			}
		}
		all = append(all, rw)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	published := 0
	held := map[string]bool{}
	for _, rw := range all {
		if rw.msg.Key != "" && held[rw.msg.Key] {
			continue
		}
		err := rw.invalid
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
			if errs := r.pub.Publish(pctx, []txbox.Message{rw.msg}); errs != nil {
				err = errs[0]
			}
			cancel()
		}
		switch {
		case err == nil:
			if _, err := r.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET published_at = now() WHERE id = $1`, r.n.table), rw.id); err != nil {
				return published, err
			}
			published++
			r.published.Add(1)
			if o := r.cfg.Observer; o != nil {
				o.Settled(rw.msg.Topic, txbox.OutcomePublished, time.Since(rw.msg.CreatedAt))
			}
		case errors.Is(err, txbox.ErrRejected) || rw.invalid != nil:
			held[rw.msg.Key] = rw.msg.Key != ""
			if err := r.recordDead(ctx, &rw.row, err, rw.attempts+1, txbox.OutcomeDead); err != nil {
				return published, err
			}
		default:
			return published, err // an outage: the next call goes on
		}
	}
	return published, nil
}

// sampleLoop hands the observer, when it is a txbox.SlotObserver, a
// reading of the slot every 10 s (relaytest.Config.SampleInterval).
func (r *Relay) sampleLoop(ctx context.Context) {
	so, ok := r.cfg.Observer.(txbox.SlotObserver)
	if !ok {
		return
	}
	t := time.NewTicker(r.cfg.test.SampleInterval)
	defer t.Stop()
	for {
		so.SlotSampled(r.sample(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample reads the slot's lag and WAL figures (one query) and the age of
// the oldest event the relay holds unsettled.
func (r *Relay) sample(ctx context.Context) txbox.SlotSample {
	s := txbox.SlotSample{At: time.Now(), Slot: r.n.slot}
	st, err := status(ctx, r.pool, r.n)
	if err == nil && !st.Exists {
		err = fmt.Errorf("%w: %s", ErrSlotMissing, r.n.slot)
	}
	if err != nil {
		s.Err = err
		return s
	}
	s.LagBytes, s.WALStatus, s.SafeWALSize = st.LagBytes, st.WALStatus, st.SafeWALSize
	if o := r.oldestHeld.Load(); o != 0 {
		s.LagSeconds = max(s.At.Sub(time.Unix(0, o)).Seconds(), 0)
	}
	return s
}

// insertDead records a message of message mode dead: a row of the table
// with dead_at set, unless a row of its message id is there (a replay
// after a restart records it once). It returns how many rows it inserted.
func (r *Relay) insertDead(ctx context.Context, rw *row, cause error, attempts int) (int64, error) {
	headers := []byte("{}")
	if len(rw.msg.Headers) > 0 {
		headers, _ = json.Marshal(rw.msg.Headers) // a map of strings
	}
	var key any
	if rw.msg.Key != "" {
		key = rw.msg.Key
	}
	topic := rw.msg.Topic
	if topic == "" {
		topic = r.cfg.MessagePrefix // the table's topic is never empty
	}
	created := rw.msg.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	tag, err := r.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (message_id, topic, ordering_key, payload, headers, created_at, attempts, last_error, dead_at)
	    SELECT $1, $2, $3, $4, $5::jsonb, $6, $7, $8, now() WHERE NOT EXISTS (SELECT 1 FROM %[1]s WHERE message_id = $1)`, r.n.table),
		rw.msg.ID, topic, key, rw.msg.Payload, string(headers), created, attempts, cause.Error())
	return tag.RowsAffected(), err
}
