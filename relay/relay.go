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
// Run returns the error, and so does Err after Start. A message the broker rejects (txbox.Reject) is
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
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/migrate"
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
	trace *txbox.PublishTrace

	// backlog is true while the last round's batch was full and held no
	// ordering key: an unordered backlog, where a second claim in flight
	// overlaps the wait for the broker's acks (see overlapLoop).
	backlog   atomic.Bool
	onBacklog chan struct{}

	// runs makes the next claim take runs of a key (see claim); floors
	// are, per key, the last row this relay delivered (see claimFloors).
	runs     atomic.Bool
	floorsMu sync.Mutex
	floors   map[string]int64

	// from is where the next claim's scan starts (see claimFrom); fullScan
	// is when a claim last scanned from the table's start, in Unix ns.
	from, fullScan atomic.Int64
	// claimTurn makes the relay's own claims (its overlapping and
	// Concurrency loops) take turns (see takeTurn).
	claimTurn chan struct{}
	// reach is the last row of the last batch when it was full and keyed
	// (the next claim's window reaches past it), else 0.
	reach atomic.Int64
	// more: the last claim stopped at the end of its window with pending
	// rows beyond it (outboxsql.Batch.Next), short of a batch.
	more atomic.Bool
	// onChain, set while the relay runs with Concurrency 1, says whether
	// its next turn comes at once: a full keyed batch is then marked and
	// followed by the next claim in one round trip (see settle); chained
	// is that claim, for the next round.
	onChain atomic.Pointer[chainHook]
	chained atomic.Pointer[chainedClaim]

	lanes        *laneKeeper // nil without Config.Lanes
	listen       *listener   // nil when the relay only polls
	notifyActive atomic.Bool
	listenFails  atomic.Int64 // times the listener failed or its check did

	check func(ctx context.Context, retry bool) ([]string, error) // the outbox table's start-up check

	obs      txbox.RelayObserver // nil: no observer calls (see observe.go)
	tracer   txbox.RelayTracer   // nil: no tracer calls
	inFlight inFlight            // claim times of the batches held, with obs
	lastGood atomic.Int64        // when a round last succeeded, Unix ns
	// upkeepWarned: the sample said once that it cannot read the
	// table's upkeep (sampleUpkeep).
	upkeepWarned atomic.Bool
	running      atomic.Bool // run is running
	// onWake, set while the relay runs (alone or in a Group), queues its
	// turn.
	onWake atomic.Pointer[wakeHook]

	life lifecycle // Start, Stop, Stopped, Err; held by a Group running it

	claimChecks       []*claimcheck.Store // Config.ClaimCheckTables (claimcheck.go)
	ccSweeps, ccSwept atomic.Int64
}

// New returns a Relay reading drv's outbox table and publishing through pub.
// It checks the configuration and touches neither database nor broker.
func New[TTx any](drv driver.Driver[TTx], pub txbox.Publisher, cfg Config) (*Relay, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: relay needs a publisher", txbox.ErrInvalidConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if c.Schema, c.Table, err = txbox.TableOf(drv, c.Schema, c.Table); err != nil {
		return nil, err
	}
	table, err := txbox.Config{Schema: c.Schema, Table: c.Table}.TableName(drv.Dialect())
	if err != nil {
		return nil, err
	}
	store, err := outboxsql.NewStore(drv.Dialect(), drv.Pool(), table, c.ClaimLease)
	if err != nil {
		return nil, err
	}
	if c.DeletePublished {
		store.DeletePublished()
	}
	r := &Relay{cfg: c, store: store, pub: pub, log: c.Logger, onBacklog: make(chan struct{}, 1), claimTurn: make(chan struct{}, 1),
		obs: c.Observer, tracer: c.Tracer}
	r.runs.Store(true) // see claim
	if _, ok := pub.(txbox.DuplicateCounter); ok {
		r.trace = &txbox.PublishTrace{Duplicate: func(int) { r.dups.Add(1) }}
	}
	if r.tracer == nil {
		r.tracer, _ = c.Observer.(txbox.RelayTracer)
	}
	r.check = func(ctx context.Context, retry bool) ([]string, error) {
		m, err := migrate.New(drv, migrate.Config{Schema: c.Schema, OutboxTable: c.Table, Logger: r.log})
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
	if r.claimChecks, err = claimChecks(drv, c); err != nil {
		return nil, err
	}
	r.check = r.withClaimChecks(r.check)
	capable := any(drv)
	if ob, ok := capable.(interface{ Driver() driver.Driver[TTx] }); ok {
		capable = ob.Driver() // an Outbox: its driver's capabilities
	}
	if c.Lanes {
		if r.lanes, err = newLaneKeeper(r, table); err != nil {
			return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
		}
	}
	if l, ok := capable.(driver.ChannelListener); ok && !c.DisableNotify {
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
// (migrate.Migrator.Check), and returns a *txbox.StartupError listing
// every problem, or nil. A database failure during the check is retried
// until ctx ends. Start and Run call it; it changes nothing.
func (r *Relay) Validate(ctx context.Context) error {
	problems, _ := r.check(ctx, true)
	if len(problems) > 0 {
		return &txbox.StartupError{Component: "relay", Problems: problems}
	}
	return nil
}

// validateOnce is Validate without its retries: a database failure during
// the check is returned as it is (driver.IsTransient), for a Group that
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
// runs the relay in the background until Stop or ctx ends. ctx bounds the
// relay's whole run, not only its start.
func (r *Relay) Start(ctx context.Context) error {
	return r.life.start(ctx, r.log, "txbox relay", func(ctx context.Context, _ context.CancelFunc) error { return r.begin(ctx) }, r.run)
}

// Err returns the error that stopped a relay run with Start by itself (an
// error wrapping txbox.ErrPublisherClosed), once Stopped is closed; nil while
// it runs and after a stop asked by Stop or ctx.
func (r *Relay) Err() error { return r.life.failure() }

// Stop asks the relay to stop and waits until it has, or until ctx ends.
// The batch in flight is finished (its acknowledged messages are marked) or
// released.
func (r *Relay) Stop(ctx context.Context) error { return r.life.stop(ctx) }

// Stopped is closed whenever the relay is not running in the background:
// before Start, and once it has stopped.
func (r *Relay) Stopped() <-chan struct{} { return r.life.done() }

// Run validates the outbox table (see Validate), then relays until ctx
// ends and returns nil; it returns the error that kept it from running
// (a *txbox.StartupError), or the one that stopped it: an error wrapping
// txbox.ErrPublisherClosed once the publisher can never publish again. Use
// Run or Start, not both.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.begin(ctx); err != nil {
		return err
	}
	return r.run(ctx)
}

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
func (r *Relay) run(ctx context.Context) error { return r.ownGroup(ctx).Run(ctx) }

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

// Listening reports whether the relay currently receives LISTEN/NOTIFY
// wake-ups (PostgreSQL through txboxpgx); when false it polls.
func (r *Relay) Listening() bool { return r.notifyActive.Load() }

func nextBackoff(prev, max time.Duration) time.Duration {
	return backoff.Next(prev, 100*time.Millisecond, max)
}

// Round claims one batch, publishes it and marks it, and returns how many
// rows it claimed. An error means the round failed as a whole or in part
// (transiently); acknowledged messages are marked even then.
func (r *Relay) Round(ctx context.Context) (int, error) { return r.round(ctx, false) }

// round is Round, or with probe a round of at most one row that counts in
// no round counter (see Relay.probe).
func (r *Relay) round(ctx context.Context, probe bool) (_ int, err error) {
	if !probe {
		r.rounds.Add(1)
	}
	stage := "claim"
	claimedAt := time.Now()
	defer func() {
		if err != nil {
			r.from.Store(0) // rows may have been given back below the scan's start
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
	} else if c := r.chained.Swap(nil); c != nil {
		batch, err, claimedAt = c.batch, c.err, c.at
		if r.obs != nil {
			r.obs.Claimed(batchLen(batch), c.took)
		}
	} else {
		release := r.takeTurn(ctx)
		batch, err = r.claim(ctx)
		release()
		if r.obs != nil {
			r.obs.Claimed(batchLen(batch), time.Since(claimedAt))
		}
	}
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	// Marks and releases must happen even when ctx was cancelled mid-round.
	finishCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if len(batch.Rows) == 0 {
		return 0, batch.Release(finishCtx)
	}
	if r.obs != nil {
		defer r.inFlight.add(claimedAt)()
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
		errs = r.publish(pubCtx, batch, out)
		cancelPub()
		if end != nil {
			end(errs)
		}
		if r.obs != nil {
			h := held(errs)
			r.obs.Published(len(out.msgs)-h, countErrs(errs)-h, time.Since(sent))
		}
	}
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
// server-side idle timeout, or SQLite's lease, is ClaimLease), and the lane
// leases of its keyed rows hold. A relay that stalled between claim and
// publish (a pause, a frozen connection) longer than that releases the
// batch instead: another relay may have sent its rows and their successors.
func (r *Relay) mayPublish(batch *outboxsql.Batch, claimedAt time.Time) bool {
	if time.Since(claimedAt)+r.cfg.PublishTimeout >= r.cfg.ClaimLease {
		return false
	}
	return r.lanes == nil || r.lanes.mayPublish(batch)
}

// claimTurnWait bounds how long a claim waits for the relay's claim in
// turn (see takeTurn).
const claimTurnWait = 100 * time.Millisecond

// takeTurn waits for the relay's claim in progress, if any, and returns
// what ends this one's turn. Claims of one relay that ran at once started
// from the same place, and the later one stepped over the rows the earlier
// one was locking: taking turns, each starts where the last one ended
// (claim), which costs PostgreSQL less per row and raised 4 relays from
// 0.89–0.92× to 0.99–1.01× of one relay's rate (docs/guide/scaling.md). A claim
// in turn that takes longer than claimTurnWait (a connection gone silent)
// holds no one back: the others go on beside it, as before.
func (r *Relay) takeTurn(ctx context.Context) (release func()) {
	done := func() { <-r.claimTurn }
	select {
	case r.claimTurn <- struct{}{}:
		return done
	default:
	}
	t := time.NewTimer(claimTurnWait)
	defer t.Stop()
	select {
	case r.claimTurn <- struct{}{}:
		return done
	case <-t.C:
	case <-ctx.Done():
	}
	return func() {}
}

// claim takes the next batch and notes where the next claim's scan starts,
// whether an overlapping claim would pay (see overlapLoop), and whether the
// next claim takes runs of a key.
//
// The plain claim takes a key's head only, and walks the backlog in id
// order until it has a batch: when the backlog holds fewer keys than a
// batch (one hot key, a few tenants, keys parked or in flight at other
// relays), it comes back short. On PostgreSQL it walks one window of the
// backlog (outboxsql.Batch.Next), elsewhere all of it. A claim with runs
// (outboxsql.Store.ClaimRuns) takes the rows behind each head too and stops
// at a full batch, at a higher cost per row, within the same window. A relay starts with runs,
// goes over to the plain claim once a batch comes back full without any
// run (heads are plenty: an unordered backlog, many keys), and back to runs
// after a plain batch that came back short with keys in it.
func (r *Relay) claim(ctx context.Context) (*outboxsql.Batch, error) {
	var batch *outboxsql.Batch
	var err error
	runs := r.runs.Load() && r.store.Runs()
	switch {
	case r.lanes != nil:
		batch, err = r.lanes.claim(ctx, r.cfg.BatchSize, r.claimFrom(), r.reach.Load(), runs)
	case runs:
		batch, err = r.store.ClaimRuns(ctx, r.cfg.BatchSize, r.claimFrom(), r.reach.Load(), r.claimFloors())
	default:
		batch, err = r.store.ClaimReaching(ctx, r.cfg.BatchSize, r.claimFrom(), r.reach.Load())
	}
	if err != nil {
		return nil, err
	}
	r.claimed(batch, runs)
	return batch, nil
}

// claimOne claims at most one row, the oldest claimable one, with the
// plain claim from the table's start, for a probe; it notes nothing for the
// next claim.
func (r *Relay) claimOne(ctx context.Context) (*outboxsql.Batch, error) {
	if r.lanes != nil {
		return r.lanes.claim(ctx, 1, 0, 0, false)
	}
	return r.store.ClaimReaching(ctx, 1, 0, 0)
}

// claimed notes, after a claim (with runs or not), where the next one
// starts and what it takes.
func (r *Relay) claimed(batch *outboxsql.Batch, runs bool) {
	full := len(batch.Rows) >= r.cfg.BatchSize
	var reach int64
	if runs {
		r.runs.Store(!full || batch.Runs())
	} else {
		r.runs.Store(!full && batch.Keyed())
	}
	switch {
	case full && !batch.Keyed():
		// Every row of its span that was claimable is in the batch: the
		// next claim, which may overlap this batch's publish, need not
		// step over its locked rows.
		r.from.Store(batch.Rows[len(batch.Rows)-1].Seq + 1)
	case full:
		// Rows behind a head of the batch wait inside its span.
		r.from.Store(batch.Rows[0].Seq)
		reach = batch.Rows[len(batch.Rows)-1].Seq
	case batch.Next != 0 && !batch.Keyed():
		// The claim read its whole window and pending rows lie beyond it:
		// the next claim goes on from there, at once (see loop). After a
		// short keyed batch the next claim takes runs, at once, from the
		// start, where the oldest heads are.
		r.from.Store(batch.Next)
	default:
		r.from.Store(0) // the backlog is drained: look at everything again
	}
	r.reach.Store(reach)
	r.more.Store(!full && batch.Next != 0)
	backlog := full && !batch.Keyed()
	r.backlog.Store(backlog)
	if backlog {
		select {
		case r.onBacklog <- struct{}{}:
		default:
		}
	}
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
				RetryAfter: retryDelay(r.cfg.RetryDelay, attempts),
				Dead:       attempts >= r.cfg.MaxAttempts,
			})
		default:
			nTransient++
			if transient == nil {
				transient = err
			}
		}
	}
	if r.mayChain(ctx, batch, published) {
		if err := r.finishChained(ctx, batch, published); err != nil {
			return fmt.Errorf("%w: %w", errFinish, err)
		}
	} else if err := batch.Finish(ctx, published, rejected, r.cfg.MaxAttempts); err != nil {
		return fmt.Errorf("%w: %w", errFinish, err)
	}
	r.noteDelivered(batch, published)
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
	if len(rejected) > len(out.invalid) {
		r.from.Store(0) // their retries come due below the scan's start
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

// chainedClaim is a claim sent with the marks of the batch before it
// (finishChained): the next round's batch, or the claim's error.
type chainedClaim struct {
	batch *outboxsql.Batch
	err   error
	at    time.Time
	took  time.Duration
}

// mayChain reports whether settle marks batch and claims the next one in
// one round trip: a full keyed batch (one relay drains a keyed backlog one
// batch at a time, its next claim waiting for these marks), every row
// acknowledged, no chained claim waiting already, and the relay's next
// turn coming at once (onChain: Concurrency 1, no other store of its
// Group waiting for its database's budget).
func (r *Relay) mayChain(ctx context.Context, batch *outboxsql.Batch, published []int64) bool {
	h := r.onChain.Load()
	return h != nil && ctx.Err() == nil && len(published) == len(batch.Rows) &&
		len(batch.Rows) >= r.cfg.BatchSize && batch.Keyed() && batch.CanChain() &&
		r.chained.Load() == nil && h.fn()
}

// finishChained marks batch's rows and claims the next batch in one round
// trip (outboxsql.Batch.FinishClaim), with the arguments the next round's
// claim would have (claim), the floors counting the rows just marked: the
// claim runs after their COMMIT. The next round takes the claimed batch.
func (r *Relay) finishChained(ctx context.Context, batch *outboxsql.Batch, published []int64) error {
	runs := r.runs.Load() && r.store.Runs()
	args := outboxsql.ClaimArgs{Limit: r.cfg.BatchSize, From: r.claimFrom(), Reach: r.reach.Load()}
	if runs {
		f := r.floorsWith(batch, published)
		args.Floors = &f
	}
	start := time.Now()
	var next *outboxsql.Batch
	var claimErr, err error
	if r.lanes != nil {
		next, claimErr, err = r.lanes.finishClaim(ctx, batch, published, args)
	} else {
		next, claimErr, err = batch.FinishClaim(ctx, published, args)
	}
	if err != nil {
		return err
	}
	if next == nil && claimErr == nil {
		return nil // nothing chained: the next round claims
	}
	c := &chainedClaim{batch: next, err: claimErr, at: start, took: time.Since(start)}
	if next != nil {
		r.claimed(next, runs)
	}
	if !r.chained.CompareAndSwap(nil, c) && next != nil {
		// Another round of the relay chained first: this claim is given
		// back, its rows claimed again by a round to come.
		return next.Release(ctx)
	}
	return nil
}

// floorsWith is claimFloors with, for each key of batch, its last row in
// published.
func (r *Relay) floorsWith(batch *outboxsql.Batch, published []int64) outboxsql.Floors {
	r.floorsMu.Lock()
	floors := maps.Clone(r.floors)
	r.floorsMu.Unlock()
	if floors == nil {
		floors = map[string]int64{}
	}
	raiseFloors(floors, batch, published)
	return floorsOf(floors)
}

// maxFloors bounds the keys a relay remembers a delivered row of, in
// multiples of BatchSize.
const maxFloors = 4

// noteDelivered records, for the keyed rows of batch whose marks just
// committed, the last one of each key: the floors of the next claims with
// runs (outboxsql.Floors). published is in the batch's order.
func (r *Relay) noteDelivered(batch *outboxsql.Batch, published []int64) {
	if !batch.Keyed() || len(published) == 0 || !r.store.Runs() {
		return
	}
	r.floorsMu.Lock()
	defer r.floorsMu.Unlock()
	if r.floors == nil || len(r.floors) > maxFloors*r.cfg.BatchSize {
		r.floors = make(map[string]int64)
	}
	raiseFloors(r.floors, batch, published)
}

// raiseFloors raises floors, per key, to the last row of batch in
// published (which is in the batch's order).
func raiseFloors(floors map[string]int64, batch *outboxsql.Batch, published []int64) {
	for _, row := range batch.Rows {
		if _, ok := slices.BinarySearch(published, row.Seq); ok && row.Key != "" && row.Seq > floors[row.Key] {
			floors[row.Key] = row.Seq
		}
	}
}

// claimFloors returns the floors for a claim with runs.
func (r *Relay) claimFloors() outboxsql.Floors {
	r.floorsMu.Lock()
	defer r.floorsMu.Unlock()
	return floorsOf(r.floors)
}

// floorsOf turns floors into a claim's Floors.
func floorsOf(floors map[string]int64) outboxsql.Floors {
	f := outboxsql.Floors{Keys: make([]string, 0, len(floors)), Seqs: make([]int64, 0, len(floors))}
	for k, seq := range floors {
		f.Keys, f.Seqs = append(f.Keys, k), append(f.Seqs, seq)
	}
	return f
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

// minFullScan is the shortest time between two claims from the table's
// start during a drain (see claimFrom).
const minFullScan = 250 * time.Millisecond

// claimFrom returns where the next claim's scan starts. While the relay
// drains a backlog in full batches, a claim starts past the last batch
// (after its last id when it held no ordering key, at its first id when it
// did) instead of at the table's start: the entries of rows delivered
// since the last VACUUM lie below it, and a scan from the start would
// step over all of them, every round. Rows below that start (a transaction
// that committed out of id order, a retry come due, a batch given back)
// are found by a claim from the start, which runs as soon as a batch comes
// back less than full, after any failure, and at least every
// min(PollInterval, 1s) during a drain, but not more often than minFullScan:
// the entries of delivered rows that a scan from the start steps over are
// most of the scan while a large backlog drains (each is a heap fetch until
// VACUUM removes it), and a relay polling every few milliseconds would
// read them all on nearly every claim.
//
// A claim cut short by its window (outboxsql.Batch.Next) is followed by the
// next window whatever the time: the relay sweeps the backlog to its end
// before it starts again from the start. Were the sweep restarted every
// minFullScan, rows lying past what a sweep reaches in that time (behind a
// parked key's long backlog, say) would never be claimed.
func (r *Relay) claimFrom() int64 {
	from := r.from.Load()
	if from != 0 && r.more.Load() {
		return from
	}
	now := time.Now().UnixNano()
	every := max(min(r.cfg.PollInterval, time.Second), minFullScan)
	if from == 0 || now-r.fullScan.Load() >= int64(every) {
		r.fullScan.Store(now)
		return 0
	}
	return from
}

// claimsFromStart reports whether the relay's next round, with none in
// flight, claims from the table's start (claimFrom): no chained claim
// waits for it and no sweep of the backlog goes on.
func (r *Relay) claimsFromStart() bool {
	return r.chained.Load() == nil && r.from.Load() == 0
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
	n, err = r.store.Cleanup(ctx, cutoff, r.cfg.CleanupBatchSize)
	return n, err == nil && n >= int64(r.cfg.CleanupBatchSize), err
}

// Stats are the relay's counters since New, and the table's state.
type Stats struct {
	Published    int64 // messages acknowledged by the broker and marked
	Rejected     int64 // broker rejections (each costs an attempt)
	Dead         int64 // messages this relay parked as dead (Invalid included)
	Invalid      int64 // rows that broke the outbox contract, parked dead at once
	Rounds       int64
	FailedRounds int64
	// Probes counts the rounds of at most one row that a relay backing
	// off after a failed round runs, every 500 ms, to resume as soon as
	// the failure is over; they are not in Rounds or FailedRounds.
	Probes int64
	// ListenFailures counts the times the LISTEN/NOTIFY connection was lost
	// or its start-up check failed (the relay polls meanwhile).
	ListenFailures int64
	// Duplicates counts the acks in which the broker said it already held
	// the message and dropped the copy (the relay's crash-after-publish
	// copies, caught by the broker's dedupe), from publishers that report
	// it (txbox.DuplicateCounter, e.g. natsjs). Only this relay's
	// messages count, also when it shares its publisher (a Group). Such
	// messages are in Published too.
	Duplicates int64
	// ClaimCheckSweeps counts the sweeps of Config.ClaimCheckTables that
	// went through, ClaimCheckSwept the payloads they deleted.
	ClaimCheckSweeps, ClaimCheckSwept int64

	Pending          int64         // rows still to deliver (table-wide), parked ones included
	DeadRows         int64         // dead rows (table-wide)
	Parked           int64         // pending rows waiting behind a dead row of their key
	OldestPendingAge time.Duration // age of the oldest row still to deliver
}

// Counters returns the relay's own counters, without reading the table
// (Pending, DeadRows and OldestPendingAge are zero).
func (r *Relay) Counters() Stats {
	return Stats{
		Published: r.published.Load(), Rejected: r.rejected.Load(), Dead: r.dead.Load(), Invalid: r.invalid.Load(),
		Rounds: r.rounds.Load(), FailedRounds: r.failedRounds.Load(), Probes: r.probes.Load(), ListenFailures: r.listenFails.Load(),
		Duplicates: r.duplicates(), ClaimCheckSweeps: r.ccSweeps.Load(), ClaimCheckSwept: r.ccSwept.Load(),
	}
}

func (r *Relay) duplicates() int64 { return r.dups.Load() }

// Stats returns the counters and reads the table's pending and dead counts.
func (r *Relay) Stats(ctx context.Context) (Stats, error) {
	s := r.Counters()
	c, err := r.store.Counts(ctx)
	if err != nil {
		return s, err
	}
	s.Pending, s.DeadRows, s.Parked, s.OldestPendingAge = c.Pending, c.Dead, c.Parked, c.OldestPendingAge
	return s, nil
}
