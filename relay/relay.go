// Package relay delivers committed outbox rows to a broker, at least once.
//
// A Relay claims up to BatchSize deliverable rows, publishes them pipelined
// through a txbox.Publisher, waits for the broker's acks, and marks what was
// acknowledged. Any number of relays may run on one database: on PostgreSQL
// the claim is FOR UPDATE SKIP LOCKED in a transaction held while
// publishing, so no two relays publish a row concurrently and a relay that
// dies releases its rows with its connection; on SQLite the claim is a lease
// with a token that fences the marks.
//
// Lifecycle and state: Start checks the table and returns once the relay
// runs; Stop stops it, finishing the batch in flight; Stopped is closed
// while it does not run and Err says why it stopped by itself. A Group has
// the same four. Stats is the one read of a relay's state: its counters,
// whether it runs and can deliver (Stats.Ready), the lanes it owns, and the
// table's backlog.
//
// Failures: a round that fails (database or broker down, timeouts, a
// stream that refuses messages) backs off exponentially up to BackoffMax
// and costs no message an attempt; the first good round resets the wait.
// The relay does not sleep out the backoff: every 500 ms it probes with a
// round of at most one row, and runs a full round as soon as the probe's
// claim goes through (after a database failure) or the broker answers the
// probe's message (after a publish failure). While a publisher that reports
// its connection (txbox.ConnectionChecker) is disconnected, it does not
// probe but starts a round as soon as the connection is back. A run of
// failed rounds is logged as one warning when it starts, a reminder a
// minute, and one line when a round succeeds again. A publisher
// that can never publish again (txbox.ErrPublisherClosed) stops the relay:
// Stopped is closed and Err returns the error. A message the broker rejects (txbox.Reject) is
// retried after RetryDelay, doubling, and after MaxAttempts rejections is
// parked as dead with its last error, while the rest flow. If part of a batch
// fails, the published part is still marked.
//
// Duplicates: a relay that dies after the broker acked a batch and before
// the marks committed leaves those rows unmarked, and they are published
// again. Publishers send the message id as the broker's dedupe id (NATS
// JetStream drops the copy inside the stream's duplicate window), so the
// copy reaches consumers only when the window has passed; consumers dedupe
// with the inbox either way.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/outboxtable"
	"github.com/txbox/txbox/internal/pubtrace"
	"github.com/txbox/txbox/internal/roundtimes"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
)

// ErrAlreadyStarted is returned by Start on a running relay.
var ErrAlreadyStarted = errors.New("txbox/relay: already started")

// Relay moves committed outbox rows to a broker.
type Relay struct {
	cfg   Config
	store *outboxsql.Store
	pub   txbox.Publisher
	log   *slog.Logger

	published, rejected, invalid, dead, rounds, failedRounds, probes atomic.Int64
	// outage logs runs of failed rounds (see outage).
	outage outage

	// dups counts the acks of this relay's publishes that said the broker
	// held the message already, told by trace (txbox.DuplicateCounter);
	// trace is nil for a publisher that does not count them.
	dups  atomic.Int64
	trace *pubtrace.Trace

	// backlog is true while the last claim came full, busy while it
	// claimed rows: the scheduler then runs the next round at once, whose
	// claim overlaps the publish and marks of the rounds in flight
	// (member.width; the lanes in flight are left out of it). onClaim is
	// signalled by a claim that claimed rows, for the next round to start
	// at once.
	backlog, busy atomic.Bool
	onClaim       chan struct{}

	lanes        *laneKeeper // nil on SQLite
	listen       *listener   // nil when the relay only polls
	notifyActive atomic.Bool
	listenFails  atomic.Int64 // times the listener failed or its check did

	check func(ctx context.Context, retry bool) ([]string, error) // the outbox table's start-up check

	obs      txbox.RelayObserver // nil: no observer calls (see observe.go)
	tracer   txbox.RelayTracer   // nil: no tracer calls
	inFlight inFlight            // claim times of the batches held, with obs
	// rec, when the tracer is one, gets the times of each round
	// (txbox bench latency's breakdown); inRounds counts the rounds in
	// flight for it.
	rec      roundtimes.Recorder
	inRounds atomic.Int32
	lastGood atomic.Int64 // when a round last succeeded, Unix ns
	// upkeepWarned: the sample said once that it cannot read the
	// table's upkeep (sampleUpkeep).
	upkeepWarned atomic.Bool
	running      atomic.Bool // run is running
	// onWake, set while the relay runs (alone or in a Group), queues its
	// turn.
	onWake atomic.Pointer[wakeHook]

	life lifecycle // Start, Stop, Stopped, Err; held by a Group running it

	ccSweeps, ccSwept atomic.Int64 // SweepClaimChecks (claimcheck.go)
}

// New returns a Relay reading drv's outbox table and publishing through pub.
// It checks the configuration and touches neither database nor broker.
func New[TTx any](drv txboxdriver.Driver[TTx], pub txbox.Publisher, cfg Config) (*Relay, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: relay needs a publisher", txbox.ErrInvalidConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if c.Schema, c.Table, err = outboxtable.Of(drv, c.Schema, c.Table); err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	table, err := txbox.Config{Schema: c.Schema, Table: c.Table}.TableName(drv.Dialect())
	if err != nil {
		return nil, err
	}
	store, err := outboxsql.NewStore(drv.Dialect(), drv.Pool(), table, c.test.ClaimLease)
	if err != nil {
		return nil, err
	}
	if c.Retention == DeletePublished {
		store.DeletePublished()
	}
	r := &Relay{cfg: c, store: store, pub: pub, log: c.Logger, onClaim: make(chan struct{}, 1),
		obs: c.Observer, tracer: c.Tracer}
	if _, ok := pub.(txbox.DuplicateCounter); ok {
		r.trace = &pubtrace.Trace{Duplicate: func(int) { r.dups.Add(1) }}
	}
	if r.tracer == nil {
		r.tracer, _ = c.Observer.(txbox.RelayTracer)
	}
	r.rec, _ = r.tracer.(roundtimes.Recorder)
	r.check = func(ctx context.Context, retry bool) ([]string, error) {
		m, err := txboxmigrate.New(drv, txboxmigrate.Config{Schema: c.Schema, OutboxTable: c.Table, Logger: r.log})
		if err != nil {
			return []string{err.Error()}, nil
		}
		var problems []string
		var note string
		if retry {
			problems, note = m.Startup(ctx)
		} else {
			problems, note, err = m.StartupOnce(ctx)
		}
		if note != "" {
			r.log.Warn("txbox relay: " + note)
		}
		return problems, err
	}
	r.check = r.withClaimChecks(r.check)
	capable := any(drv)
	if ob, ok := capable.(interface {
		Driver() txboxdriver.Driver[TTx]
	}); ok {
		capable = ob.Driver() // an Outbox: its driver's capabilities
	}
	if LanesSupported(drv.Dialect()) {
		if r.lanes, err = newLaneKeeper(r, table); err != nil {
			return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
		}
	}
	if l, ok := capable.(txboxdriver.ChannelListener); ok && !c.DisableNotify {
		r.listen = &listener{r: r, chans: l, pool: drv.Pool()}
	}
	return r, nil
}

// Config returns the configuration in force, defaults applied.
func (r *Relay) Config() Config { return r.cfg }

// Wake makes an idle relay poll now instead of at the end of its poll
// interval. Call it after committing a transaction that added messages, in
// the same process, for millisecond delivery. It never blocks.
func (r *Relay) Wake() {
	if h := r.onWake.Load(); h != nil {
		h.fn()
	}
}

// Validate checks that the outbox table is there, migrated and usable
// (txboxmigrate.Migrator.Check), and returns a *txbox.StartupError listing
// every problem, or nil. A database failure during the check is retried
// until ctx ends. Start calls it; it changes nothing.
func (r *Relay) Validate(ctx context.Context) error {
	problems, _ := r.check(ctx, true)
	if len(problems) > 0 {
		return &txbox.StartupError{Component: "relay", Problems: problems}
	}
	return nil
}

// validateOnce is Validate without its retries: a database failure during
// the check is returned as it is (txboxdriver.IsTransient), for a Group that
// retries each store on its own.
func (r *Relay) validateOnce(ctx context.Context) error {
	problems, err := r.check(ctx, false)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return &txbox.StartupError{Component: "relay", Problems: problems}
	}
	return nil
}

// Start validates the outbox table (see Validate) and, when it is sound,
// starts the relay and returns: it relays in the background until Stop or
// until ctx ends (ctx bounds the relay's whole run, not only its start).
// It returns the error that kept the relay from starting: a
// *txbox.StartupError, ctx's error, or ErrAlreadyStarted on a running
// relay. A publisher that can never publish again stops the relay by
// itself: Stopped is then closed and Err says why.
func (r *Relay) Start(ctx context.Context) error {
	return r.life.start(ctx, r.log, "txbox relay", func(ctx context.Context, _ context.CancelFunc) error { return r.begin(ctx) }, r.run)
}

// Err returns the error that stopped the relay by itself (an error
// wrapping txbox.ErrPublisherClosed), once Stopped is closed; nil while it
// runs and after a stop asked by Stop or ctx.
func (r *Relay) Err() error { return r.life.failure() }

// Stop asks the relay to stop and waits until it has, or until ctx ends.
// The batch in flight is finished (its acknowledged messages are marked) or
// released.
func (r *Relay) Stop(ctx context.Context) error { return r.life.stop(ctx) }

// Stopped is closed whenever the relay is not running: before Start, and
// once it has stopped (by Stop, by ctx, or by itself; see Err).
func (r *Relay) Stopped() <-chan struct{} { return r.life.done() }

// begin validates the outbox table and, with an Observer, hands it the
// first sample (sampleFirst) before the first round.
func (r *Relay) begin(ctx context.Context) error {
	if err := r.Validate(ctx); err != nil {
		return err
	}
	r.sampleFirst(ctx)
	return nil
}

// run relays as a Group of one store (see Group).
func (r *Relay) run(ctx context.Context) error { return r.ownGroup(ctx).run(ctx) }

// While it listens for notifications, an idle relay looks again after
// minRecheck, doubling, and arms the doorbell once armAfter has passed: one
// more look 2 ms after the round that found nothing, then the doorbell. A
// longer wait (looks at 2, 4, 8 and 16 ms, armed after 30) spared writers
// the notification when commits came every few milliseconds, but then
// each commit waited for the relay's next look: at a trickle of 200
// commits/s (txbox bench latency) the median commit-to-broker latency was
// 2.8-2.9 ms against 0.8-1.0 ms now, at a writers' rate that did not move
// beyond the machine's noise (docs/guide/scaling.md).
const (
	minRecheck = 2 * time.Millisecond
	armAfter   = 2 * time.Millisecond
)

func (r *Relay) tableName() string {
	if r.cfg.Table == "" {
		return txbox.DefaultTable
	}
	return r.cfg.Table
}

// listening reports whether the relay currently receives LISTEN/NOTIFY
// wake-ups (PostgreSQL through txboxpgx); when false it polls.
func (r *Relay) listening() bool { return r.notifyActive.Load() }

func nextBackoff(prev, max time.Duration) time.Duration {
	return backoff.Next(prev, 100*time.Millisecond, max)
}

// Round claims one batch, publishes it and marks it, and returns how many
// rows it claimed. An error means the round failed as a whole or in part
// (transiently); acknowledged messages are marked even then. A relay that
// does not run (Start, a Group) takes its lanes in its Round, with a
// heartbeat while its lease runs short; they pass to other relays
// a lane lease (10s) after its last Round.
func (r *Relay) Round(ctx context.Context) (int, error) { return r.round(ctx, false) }

// round is Round, or with probe a round of at most one row that counts in
// no round counter (see Relay.probe).
func (r *Relay) round(ctx context.Context, probe bool) (_ int, err error) {
	if !probe {
		r.rounds.Add(1)
	}
	stage := "claim"
	claimedAt := time.Now()
	var times *roundtimes.Round
	if r.rec != nil && !probe {
		times = &roundtimes.Round{Start: claimedAt, Beside: int(r.inRounds.Add(1)) - 1}
		defer r.inRounds.Add(-1)
	}
	defer func() {
		if err != nil {
			if !probe {
				r.failedRounds.Add(1)
				if r.obs != nil {
					r.obs.RoundFailed(stage)
				}
			}
		} else {
			r.lastGood.Store(time.Now().UnixNano())
		}
	}()
	var batch *outboxsql.Batch
	if probe {
		batch, err = r.claimOne(ctx)
		if r.obs != nil && err == nil {
			r.obs.Claimed(batchLen(batch), time.Since(claimedAt))
		}
	} else {
		batch, err = r.claim(ctx)
		if r.obs != nil {
			r.obs.Claimed(batchLen(batch), time.Since(claimedAt))
		}
	}
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	if times != nil && len(batch.Rows) > 0 {
		times.Claimed = time.Now()
		times.Sent, times.Answered = batch.Started, batch.Answered
		defer func() {
			times.Finished = time.Now()
			r.rec.RelayRound(*times)
		}()
	}
	// Marks and releases must happen even when ctx was cancelled mid-round.
	finishCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if len(batch.Rows) == 0 {
		return 0, batch.Release(finishCtx)
	}
	forget := func() {}
	if r.obs != nil {
		forget = r.inFlight.add(claimedAt)
		defer forget()
	}
	out := r.prepare(batch.Rows)
	if !r.mayPublish(batch, claimedAt) {
		return 0, errors.Join(errLeaseStale, batch.Release(finishCtx))
	}
	var errs []error
	if len(out.msgs) > 0 {
		// Acks in flight are awaited even when ctx ends (Stop), up to
		// PublishTimeout, so that what the broker stored gets marked.
		var sent time.Time
		if r.obs != nil {
			sent = time.Now()
		}
		pubCtx, cancelPub := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
		var end func([]error)
		if r.tracer != nil {
			pubCtx, end = r.tracer.StartPublish(pubCtx, out.msgs)
		}
		if times != nil {
			times.Publish = time.Now()
			times.IDs = make([]string, len(out.msgs))
			for i, m := range out.msgs {
				times.IDs[i] = m.ID
			}
		}
		errs = r.publish(pubCtx, batch, out)
		if times != nil {
			times.Acked = time.Now()
		}
		cancelPub()
		if end != nil {
			end(errs)
		}
		if r.obs != nil {
			h := held(errs)
			r.obs.Published(len(out.msgs)-h, countErrs(errs)-h, time.Since(sent))
		}
	}
	// The batch leaves the in-flight figure before its marks commit, so
	// that a sample whose backlog shows them does not count it (Sample).
	forget()
	stage = "publish" // settle's error is about the publish, unless it says finish
	if err := r.settle(finishCtx, batch, out, errs); err != nil {
		if errors.Is(err, errFinish) {
			stage = "finish"
		}
		return len(batch.Rows), err
	}
	return len(batch.Rows), nil
}

// mayPublish reports whether batch, claimed from claimedAt on, may still
// be published: its claim outlives the publish (the claim transaction's
// server-side idle timeout, or SQLite's lease, is the claim lease), and the lane
// leases of its keyed rows hold. A relay that stalled between claim and
// publish (a pause, a frozen connection) longer than that releases the
// batch instead: another relay may have sent its rows and their successors.
func (r *Relay) mayPublish(batch *outboxsql.Batch, claimedAt time.Time) bool {
	if time.Since(claimedAt)+r.cfg.PublishTimeout >= r.cfg.test.ClaimLease {
		return false
	}
	return r.lanes == nil || r.lanes.mayPublish(batch)
}

// claim takes the next batch: from the lanes this relay owns and, rows
// without a key, from anywhere (outboxsql.Lanes.Claim); on SQLite, with a
// lease (outboxsql.Store.Claim). After a claim that claimed rows, the
// next claim overlaps the batch's publish and marks (member.width).
func (r *Relay) claim(ctx context.Context) (*outboxsql.Batch, error) {
	var batch *outboxsql.Batch
	var err error
	if r.lanes != nil {
		batch, err = r.lanes.claim(ctx, r.cfg.BatchSize)
	} else {
		batch, err = r.store.Claim(ctx, r.cfg.BatchSize, 0)
	}
	if err != nil {
		return nil, err
	}
	r.claimed(len(batch.Rows))
	return batch, nil
}

// claimed notes that a claim took n rows: whether batches come full
// (backlog) and whether claims find rows (busy), which let the scheduler
// run rounds side by side (member.width); and, when it took rows, tells
// the scheduler (onClaim) so that the next round starts at once.
func (r *Relay) claimed(n int) {
	r.backlog.Store(n >= r.cfg.BatchSize)
	r.busy.Store(n > 0)
	if n > 0 {
		select {
		case r.onClaim <- struct{}{}:
		default:
		}
	}
}

// claimOne claims at most one row, the oldest claimable one, for a probe.
func (r *Relay) claimOne(ctx context.Context) (*outboxsql.Batch, error) {
	if r.lanes != nil {
		return r.lanes.claim(ctx, 1)
	}
	return r.store.Claim(ctx, 1, 0)
}

// prepared is a claimed batch turned into messages: msgs[i] is the message
// of rows[rowOf[i]]; invalid holds the rows that break the contract.
type prepared struct {
	msgs    []txbox.Message
	rowOf   []int
	invalid []outboxsql.Rejection
}

// prepare decodes the claimed rows and checks each against the message
// contract and the publisher's own limits (txbox.MessageChecker). A row
// that fails is not published: settle parks it dead at once, so that it
// costs no broker call and delays no other row.
func (r *Relay) prepare(rows []outboxsql.Claimed) prepared {
	out := prepared{msgs: make([]txbox.Message, 0, len(rows)), rowOf: make([]int, 0, len(rows))}
	checker, _ := r.pub.(txbox.MessageChecker)
	for i, row := range rows {
		m, err := decodeRow(row)
		if err == nil && checker != nil {
			err = checker.CheckMessage(m)
		}
		if err != nil {
			var ime *txbox.InvalidMessageError
			if errors.As(err, &ime) { // the row's seq says which; no index, no id
				err = errors.New(ime.Field + " " + ime.Reason)
			}
			out.invalid = append(out.invalid, outboxsql.Rejection{Seq: row.Seq, Err: truncate("invalid row: "+err.Error(), 2000), Invalid: true})
			continue
		}
		out.msgs = append(out.msgs, m)
		out.rowOf = append(out.rowOf, i)
	}
	return out
}

// decodeRow turns one claimed row into a message and checks it against the
// message contract: the headers column is a JSON object of strings ("{}" or
// shorter: none), the id is not empty, the message passes Validate. It
// reads nothing but row.
func decodeRow(row outboxsql.Claimed) (txbox.Message, error) {
	m := txbox.Message{ID: row.ID, Topic: row.Topic, Key: row.Key, Payload: row.Payload, CreatedAt: row.CreatedAt}
	err := row.Invalid
	if err == nil && len(row.Headers) > 2 { // not "{}"
		var jerr error
		if m.Headers, jerr = decodeHeaders(row.Headers); jerr != nil {
			err = fmt.Errorf("headers are not a JSON object of strings: %w", jerr)
		}
	}
	if err == nil && m.ID == "" {
		err = errors.New("message_id is empty")
	}
	if err == nil {
		err = m.Validate(0)
	}
	return m, err
}

// settle records the broker's answers: acknowledged rows are marked,
// rejected ones cost an attempt (dead after MaxAttempts), invalid ones are
// dead at once; the rest (outage, timeout) go back untouched.
func (r *Relay) settle(ctx context.Context, batch *outboxsql.Batch, out prepared, errs []error) error {
	published := make([]int64, 0, len(out.msgs))
	rejected := out.invalid
	var transient error
	nTransient := 0
	for i := range out.msgs {
		row := batch.Rows[out.rowOf[i]]
		var err error
		if errs != nil {
			err = errs[i]
		}
		if errors.Is(err, errHeldBack) {
			continue // not sent: released untouched, no attempt counted
		}
		switch {
		case err == nil:
			published = append(published, row.Seq)
		case txbox.IsRejected(err):
			attempts := row.Attempts + 1
			rejected = append(rejected, outboxsql.Rejection{
				Seq:        row.Seq,
				Err:        truncate(err.Error(), 2000),
				RetryAfter: retryDelay(r.cfg.test.RetryDelay, attempts),
				Dead:       attempts >= r.cfg.MaxAttempts,
			})
		default:
			nTransient++
			if transient == nil {
				transient = err
			}
		}
	}
	if err := batch.Finish(ctx, published, rejected, r.cfg.MaxAttempts); err != nil {
		return fmt.Errorf("%w: %w", errFinish, err)
	}
	if r.obs != nil {
		r.observeSettled(batch, out, errs, rejected)
	}
	r.published.Add(int64(len(published)))
	r.invalid.Add(int64(len(out.invalid)))
	r.rejected.Add(int64(len(rejected) - len(out.invalid)))
	for _, rj := range rejected {
		topic, id := rowNames(batch, rj.Seq)
		switch {
		case rj.Invalid:
			r.dead.Add(1)
			r.log.Error("txbox relay: message is dead: the row breaks the outbox contract", "seq", rj.Seq, "topic", topic, "message_id", id, "err", rj.Err)
		case rj.Dead:
			r.dead.Add(1)
			r.log.Error("txbox relay: message is dead after too many rejections", "seq", rj.Seq, "topic", topic, "message_id", id, "err", rj.Err)
		default:
			r.log.Warn("txbox relay: broker rejected message", "seq", rj.Seq, "topic", topic, "message_id", id, "err", rj.Err, "retry_in", rj.RetryAfter)
		}
	}
	if transient != nil {
		return fmt.Errorf("%w: %d of %d messages not acknowledged: %w", errPublish, nTransient, len(out.msgs), transient)
	}
	return nil
}

// rowNames returns the topic and message id of the batch's row seq, for a
// log line.
func rowNames(batch *outboxsql.Batch, seq int64) (topic, id string) {
	for _, row := range batch.Rows {
		if row.Seq == seq {
			return row.Topic, row.ID
		}
	}
	return "", ""
}

// blameMessages turns, in the answers of one Publish call, a failure
// followed by an acknowledgement of a later message into a rejection: the
// broker was there and took the next message, so the failure is about the
// message, whatever the publisher called it.
func blameMessages(errs []error) {
	lastAck := -1
	for i := range errs {
		if errs[i] == nil {
			lastAck = i
		}
	}
	for i, err := range errs[:max(lastAck, 0)] {
		if err != nil && !txbox.IsRejected(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs[i] = txbox.Reject(fmt.Errorf("%w (the broker acknowledged later messages of the batch)", err))
		}
	}
}

// claimsFromStart reports whether the relay's next claim, with none in
// flight, reads from the table's start: every lane it holds, each from its
// first undelivered row, and rows without a key from the first
// (outboxsql.Lanes.FromStart); on SQLite every claim does.
func (r *Relay) claimsFromStart() bool {
	return r.lanes == nil || r.lanes.db.FromStart()
}

func retryDelay(base time.Duration, attempts int) time.Duration {
	return backoff.Nth(base, 5*time.Minute, attempts)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Cleanup deletes rows published more than Retention ago, in statements of
// at most CleanupBatchSize rows, and returns how many it deleted. Pending
// and dead rows are never deleted. Rows another transaction has locked
// (the cleanup of another relay) are skipped, not waited for: the cleanups
// of several relays share the rows.
func (r *Relay) Cleanup(ctx context.Context) (int64, error) {
	start := time.Now()
	cutoff := start.Add(-r.cfg.Retention)
	var total int64
	said := start
	for {
		n, more, err := r.cleanupBatch(ctx, cutoff)
		total += n
		if err != nil || !more {
			return total, err
		}
		if now := time.Now(); now.Sub(said) >= cleanupProgress {
			// A first cleanup after Retention was lowered can take hours.
			said = now
			r.log.Info("txbox relay: cleanup going on", "deleted", total, "for", now.Sub(start).Round(time.Second))
		}
	}
}

// cleanupProgress is how often a long cleanup logs how far it got.
const cleanupProgress = 30 * time.Second

// cleanupBatch runs one statement of Cleanup, on the rows published before
// cutoff, and reports whether there may be more.
func (r *Relay) cleanupBatch(ctx context.Context, cutoff time.Time) (n int64, more bool, err error) {
	n, err = r.store.Cleanup(ctx, cutoff, r.cfg.test.CleanupBatchSize)
	return n, err == nil && n >= int64(r.cfg.test.CleanupBatchSize), err
}

func (r *Relay) laneConflicts() int64 {
	if r.lanes == nil {
		return 0
	}
	return r.lanes.db.Conflicts()
}

func (r *Relay) duplicates() int64 { return r.dups.Load() }
