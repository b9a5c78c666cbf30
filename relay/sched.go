package relay

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/txbox/txbox"
)

// member is one store of a Group, and the scheduling state of its relay:
// a Relay run on its own is the one member of a Group of its own.
type member struct {
	name string
	r    *Relay
	// round runs one round of the store: r.Round (a test's stand-in in
	// the scheduler's own tests).
	round func(context.Context) (int, error)
	// fromStart reports whether its next claim reads from the table's
	// start: r.claimsFromStart (a test's stand-in in the same tests).
	fromStart func() bool
	db        *database
	log       *slog.Logger // the relay's own logger, given back when it leaves
	own       bool         // the group is the relay's own (Relay.Start)

	queued bool
	rounds int  // rounds in flight
	again  bool // turned away for its budget while a round ran: queue it again after
	// woken: a Wake came that no round has answered yet. It is answered by
	// a round that starts after it, with no other round in flight, and
	// claims from the table's start (Relay.claimsFromStart); the rounds in
	// flight or queued meanwhile may not (their claims began before it, or
	// go on with a backlog: rows without a key from past the last batch,
	// a few lanes at a time), so the store does not go idle while it is
	// owed one.
	woken bool
	// armed: its last round found nothing and left its doorbell armed
	// while it listens: its next round, unless woken, is a look for rows
	// whose commit did not ring (see dispatch).
	armed bool
	// started counts m's rounds; a turn knows its own (turnOf).
	started uint64
	full    bool // its last round claimed a full batch
	removed bool // Remove was called
	// done is made by Remove while rounds run, closed once the last ends.
	done  chan struct{}
	timer *time.Timer // the poll, backoff or probe wait, while idle
	// While it backs off after a failed round (failed is that round's
	// error), its turns are probes (Relay.probe) until retryAt, when a full
	// round is due, or until a wake or the broker's reconnect (wakeBy).
	backoff   time.Duration
	failed    error
	retryAt   time.Time
	resumedBy string // how the last wait after a failure ended
	wakeBy    string
	stopWatch context.CancelFunc // ends the watch for the broker's reconnect
	ctx       context.Context
	cancel    context.CancelFunc

	// chores: one turn at a time runs them (choring); cleaning says, for
	// settle, that a cleanup is in progress.
	choring, cleaning bool
	cleanupAt         time.Time
	// A cleanup in progress, one batch a turn: its cutoff (zero: none),
	// the rows it deleted so far, when it began.
	cleanupCutoff  time.Time
	cleaned        int64
	cleanupStarted time.Time
	cleanupSaid    time.Time // when it last said how far it got

	channel string // its notify channel; "" when it only polls
	bellMu  sync.Mutex
	bell    doorbell
	// services runs the relay's lane lease heartbeat (see services);
	// ready is its ready, for the turns.
	services *services
	ready    <-chan struct{}
}

// pipeline is how many rounds of a relay run at once while its batches
// come full, or while its claims find rows: one claims while one
// publishes and one is marked.
const pipeline = 3

// width is how many rounds of m may run at once: the relay's Concurrency,
// at least pipeline while its batches come full, and while its claims find
// rows at least two, or pipeline for a round queued by a claim that just
// found rows (claimed: watchClaims). So while claims find rows, each one
// that finds rows is followed at once by the next, whose claim overlaps
// the publish and marks of the rounds in flight: a row committed while a
// round publishes or is marked is claimed then, not after that round's
// marks; and a claim that finds nothing queues no other.
func (m *member) width(claimed bool) int {
	w := m.r.cfg.test.Concurrency
	switch {
	case m.r.backlog.Load():
		w = max(w, pipeline)
	case m.r.busy.Load() && claimed:
		w = max(w, pipeline)
	case m.r.busy.Load():
		w = max(w, 2)
	}
	return w
}

// start makes m part of the running group and queues its first round.
// Called with g.mu held.
func (g *Group) start(m *member) {
	m.ctx, m.cancel = context.WithCancel(g.runCtx)
	m.r.running.Store(true)
	m.r.onWake.Store(&wakeHook{fn: func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.running && !m.removed {
			g.wake(m)
		}
	}})
	m.services = m.r.startServices(g.runCtx)
	m.ready = m.services.ready
	g.bg.Go(func() { g.watchClaims(m) })
	now := time.Now()
	m.cleanupAt = now.Add(m.r.cfg.test.CleanupInterval)
	g.enqueue(m)
	g.subscribe(m)
}

// finish ends m's run once its last round is over: its services stop
// (its lanes are given up), its doorbell is disarmed. Called without g.mu.
func (m *member) finish(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if m.services != nil {
		m.services.stop(ctx)
		m.services = nil
	}
	m.bell.release(ctx)
}

// park takes m out of the queue and stops its wait. Called with g.mu held.
func (g *Group) park(m *member) {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if m.stopWatch != nil {
		m.stopWatch()
		m.stopWatch = nil
	}
	if m.queued {
		for i, q := range g.queue {
			if q == m {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				break
			}
		}
		m.queued = false
	}
}

// wake queues m for a round now, ahead of the stores queued before it,
// and makes m owe a round from the table's start (woken) until one starts:
// a store woken while its rounds run or its turn is queued gets one after
// them, in its place in the queue. A wake while m backs off ends the wait:
// the round it gets is a full one, not a probe. Called with g.mu held.
func (g *Group) wake(m *member) {
	if m.r.rec != nil {
		m.r.rec.RelayWake(time.Now(), m.queued || m.rounds > 0)
	}
	m.woken = true
	if m.failed != nil {
		m.wakeBy = resumedByWake
	}
	if m.queued || m.rounds > 0 {
		return
	}
	g.park(m)
	g.enqueue(m)
	// A store that was idle goes first, once per wake: a store queued
	// meanwhile waits for at most one round of each store woken.
	copy(g.queue[1:], g.queue)
	g.queue[0] = m
	g.dispatch()
}

func (g *Group) enqueue(m *member) {
	m.queued = true
	g.queue = append(g.queue, m)
	g.emit(EventQueued, m, 0, nil)
}

// dispatch starts the turns of the queued stores whose database has budget
// left, in queue order, and queues another round of those whose backlog
// lets rounds run side by side (see more). Such a round, and a look (a
// round of a store whose doorbell is armed, not woken since: its rows
// ring), starts only while it leaves a unit of the budget free, or none is
// in use: the looks of many idle stores do not hold the budget a store
// with work waits for. Called with g.mu held.
func (g *Group) dispatch() {
	for g.running {
		q := g.queue
		g.queue = make([]*member, 0, len(q))
		var started []*member
		for _, m := range q {
			if m.rounds > 0 && m.db.busy+1 >= m.db.budget {
				// A store's round beside its own (see more) leaves one
				// unit of its database's budget to the others, and does
				// not hold a place in the queue: its round in flight
				// queues it again when it ends (again).
				m.queued, m.again = false, true
				continue
			}
			if m.db.busy >= m.db.budget || m.db.busy > 0 && m.db.busy+1 >= m.db.budget && m.armed && !m.woken {
				g.queue = append(g.queue, m)
				continue
			}
			m.queued = false
			m.started++
			t := turnOf{id: m.started, alone: m.rounds == 0 && m.fromStart()}
			if t.alone {
				m.woken = false
			}
			m.db.busy++
			m.rounds++
			m.again = false
			g.emit(EventStarted, m, 0, nil)
			g.rounds.Add(1)
			go g.turn(m, t)
			started = append(started, m)
		}
		n := len(g.queue)
		for _, m := range started {
			g.more(m, false)
		}
		if len(g.queue) == n {
			return
		}
	}
}

// more queues another round of m beside those in flight when its work
// lets one run (width): its last round came full, or its last claim found
// rows (claimed: that claim just did, watchClaims). Called with g.mu held.
func (g *Group) more(m *member, claimed bool) {
	if g.running && !m.queued && !m.removed && m.failed == nil && m.rounds > 0 && m.db.busy+1 < m.db.budget &&
		m.rounds < m.width(claimed) && (m.full || m.r.busy.Load()) {
		g.enqueue(m)
	}
}

// watchClaims queues another round of m as soon as a claim finds rows
// (Relay.claim), so that its claim overlaps the publish and marks of the
// rounds in flight.
func (g *Group) watchClaims(m *member) {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.r.onClaim:
		}
		g.mu.Lock()
		g.more(m, true)
		g.dispatch()
		g.mu.Unlock()
	}
}

// turnOf is what a turn of m knows of itself: the number of its round
// (member.started), and whether the round started with no other round of
// m in flight and claims from the table's start (Relay.claimsFromStart).
type turnOf struct {
	id    uint64
	alone bool
}

// turn runs one round of m (and its cleanup when due, and while
// it backs off, a probe instead), then decides when m's next turn comes.
func (g *Group) turn(m *member, t turnOf) {
	defer g.rounds.Done()
	if m.ctx.Err() != nil {
		g.settle(m.ctx, m, t, 0, nil, 0, false)
		return
	}
	select {
	case <-m.ready: // a relay with lanes claims keyed rows only once it holds lanes
	case <-m.ctx.Done():
		g.settle(m.ctx, m, t, 0, nil, 0, false)
		return
	}
	ctx, cancel := graceful(m.ctx)
	defer cancel()
	g.mu.Lock()
	failed, probe := m.failed, false
	if failed != nil {
		m.resumedBy = cmp.Or(m.wakeBy, resumedByBackoff)
		probe = m.wakeBy == "" && time.Now().Before(m.retryAt)
	}
	m.wakeBy = ""
	chores := !m.choring
	m.choring = true
	g.mu.Unlock()
	if chores {
		cleaning := g.chores(ctx, m)
		g.mu.Lock()
		m.choring, m.cleaning = false, cleaning
		g.mu.Unlock()
	}
	if probe {
		if err := m.r.probe(ctx, failed); err != nil {
			g.settle(ctx, m, t, 0, err, 0, true)
			return
		}
		g.mu.Lock()
		m.resumedBy = resumedByProbe
		g.mu.Unlock()
	}
	n, err := m.round(ctx)
	var next time.Duration
	armed := false
	if n > 0 || err != nil || !g.beside(m) {
		next, armed = g.ring(ctx, m, n, err)
	}
	g.mu.Lock()
	m.armed = armed
	g.mu.Unlock()
	g.settle(ctx, m, t, n, err, next, false)
}

// beside reports whether another round of m is in flight: a round that
// found nothing beside it leaves the doorbell alone and m's next turn to
// it (settle).
func (g *Group) beside(m *member) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return m.rounds > 1
}

// stopGrace is how long a turn's round goes on once its store stops.
const stopGrace = 5 * time.Second

// graceful returns the context of a turn of a store whose run is ctx: it
// ends stopGrace after ctx. A round in flight when the store stops
// finishes its claim (then publishes and marks, or releases, its batch)
// instead of having its claim cut mid-statement, whose row locks stay
// until the server notices the connection gone.
func graceful(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(stopGrace, cancel) })
	return rctx, func() {
		stop()
		cancel()
	}
}

// ring keeps m's doorbell (armed while idle, disarmed at work) and returns
// how long m, idle, waits before its next round: 0 for at once; and
// whether the doorbell is armed.
func (g *Group) ring(ctx context.Context, m *member, n int, err error) (time.Duration, bool) {
	switch {
	case err != nil || ctx.Err() != nil:
		return m.r.cfg.PollInterval, false
	case !m.r.listening() && n == 0:
		return m.r.cfg.PollInterval, false
	}
	m.bellMu.Lock()
	defer m.bellMu.Unlock()
	if n > 0 {
		m.bell.worked(ctx)
		return 0, false
	}
	wait, err := m.bell.quiet(ctx, m.r.cfg.PollInterval)
	if err != nil && ctx.Err() == nil {
		m.r.log.Warn("txbox relay: cannot arm the wake-up doorbell; polling", "err", err)
	}
	// The look at once after arming is for a commit that came before:
	// it did not ring.
	return wait, err == nil && m.bell.armed && wait > 0
}

// settle ends a turn t of m and decides when m's next turn comes (next:
// after an idle round). m waits only after a round that claimed nothing
// from the table's start, alone (t.alone), read it all (its claim left no
// lane unread: m.fromStart still holds after it), with no round started
// after it and no Wake since (woken); after any other round its next
// comes at once.
// After a failed round m backs off, its turns meanwhile probing every
// probeEvery (probed: this turn was such a probe, and it failed), and
// while its publisher says it is not connected, a full round comes as
// soon as it is again.
func (g *Group) settle(ctx context.Context, m *member, t turnOf, n int, err error, next time.Duration, probed bool) {
	g.mu.Lock()
	m.db.busy--
	m.rounds--
	g.emit(EventFinished, m, n, err)
	if m.removed {
		g.dispatch()
		last := m.rounds == 0
		g.mu.Unlock()
		if last {
			g.leave(ctx, m)
			close(m.done)
		}
		return
	}
	defer g.mu.Unlock()
	defer g.dispatch()
	if !g.running || ctx.Err() != nil {
		return
	}
	conn, _ := m.r.pub.(txbox.ConnectionChecker)
	switch {
	case errors.Is(err, txbox.ErrPublisherClosed):
		m.r.log.Error(g.prefix+": the publisher can never publish again; stopping", "err", err)
		if g.fatal == nil {
			g.fatal = err
		}
		g.stop()
		return
	case probed:
	case err == nil && n == 0 && m.rounds > 0:
		// It found nothing beside a round still in flight, which claimed
		// after or before it: that round decides (it queues m again, as it
		// began before this one ended), also whether an outage ended: an
		// empty claim published nothing, so it proves no broker is back.
		return
	case err == nil && n == 0 && m.failed != nil && !t.alone:
		// It found nothing, begun beside a round that failed since (whose
		// rows it could not take): it proves no broker is back either; m
		// goes on backing off.
	case err != nil:
		now := time.Now()
		m.backoff = nextBackoff(m.backoff, m.r.cfg.test.BackoffMax)
		m.failed, m.retryAt = err, now.Add(m.backoff)
		m.r.outage.failed(m.r.log, err, m.backoff, conn != nil && !conn.Connected(), now)
	case n > 0 || m.again || m.woken || next == 0 || m.cleaning || !t.alone || t.id != m.started || !m.fromStart():
		g.recovered(m)
		m.full = n >= m.r.cfg.BatchSize
		if !m.queued {
			g.enqueue(m)
		}
		return
	default:
		g.recovered(m)
		m.full = false
	}
	if m.rounds > 0 || m.queued {
		return // the round still in flight decides
	}
	if m.woken {
		// Woken while this round ran: it failed, or it was a probe. The
		// wake ends the backoff, as it does for a store waiting.
		m.wakeBy = resumedByWake
		g.enqueue(m)
		return
	}
	// An idle store's wait is drawn from its second half, so that stores
	// that went idle together look again at different times, not in one
	// burst that queues ahead of a store with work.
	wait := next/2 + rand.N(next/2+1)
	if m.failed != nil {
		wait = min(probeEvery, time.Until(m.retryAt))
	}
	m.timer = time.AfterFunc(wait, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.running && !m.removed && !m.queued && m.rounds == 0 {
			m.timer = nil
			g.enqueue(m)
			g.dispatch()
		}
	})
	if m.failed != nil && conn != nil && !conn.Connected() {
		g.watchReconnect(m, conn)
	}
}

// recovered ends m's backoff after a round that succeeded.
func (g *Group) recovered(m *member) {
	m.backoff, m.failed, m.retryAt = 0, nil, time.Time{}
	m.r.outage.ended(m.r.log, m.resumedBy, time.Now())
}

// reconnectCheck is how often a store whose broker is away looks whether
// its publisher is connected again (a read of the connection's state).
const reconnectCheck = 20 * time.Millisecond

// watchReconnect queues m, backing off while its publisher is not
// connected, for a full round as soon as it is again (looked at every
// reconnectCheck). Called with g.mu held; park ends the watch.
func (g *Group) watchReconnect(m *member, conn txbox.ConnectionChecker) {
	if m.stopWatch != nil {
		m.stopWatch()
	}
	ctx, cancel := context.WithCancel(m.ctx)
	m.stopWatch = cancel
	go func() {
		t := time.NewTicker(reconnectCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !conn.Connected() {
				continue
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if ctx.Err() == nil && g.running && !m.removed && !m.queued && m.rounds == 0 {
				m.backoff = 0 // the broker is back: a failure now starts the backoff afresh
				g.park(m)
				m.wakeBy = resumedByReconnect
				g.enqueue(m)
				g.dispatch()
			}
			return
		}
	}()
}

// chores runs m's cleanup when it is due, in m's
// turn, so that they count against its database's budget, and reports
// whether a cleanup is in progress. A cleanup runs one statement
// (CleanupBatchSize rows) a turn, and its store's round follows it: a
// store with a large cleanup to do (the first after its Retention was
// lowered: hours) goes on relaying meanwhile. Its next turn comes at once
// while the cleanup has more to do.
func (g *Group) chores(ctx context.Context, m *member) bool {
	now := time.Now()
	if m.cleanupCutoff.IsZero() && now.After(m.cleanupAt) {
		m.cleanupCutoff, m.cleaned, m.cleanupStarted, m.cleanupSaid = now.Add(-m.r.cfg.Retention), 0, now, now
	}
	if !m.cleanupCutoff.IsZero() {
		n, more, err := m.r.cleanupBatch(ctx, m.cleanupCutoff)
		m.cleaned += n
		switch {
		case err != nil && ctx.Err() == nil:
			m.r.log.Warn("txbox relay: cleanup failed", "err", err, "deleted", m.cleaned)
		case err == nil && !more && m.cleaned > 0:
			m.r.log.Info("txbox relay: cleanup", "deleted", m.cleaned, "for", now.Sub(m.cleanupStarted).Round(time.Millisecond))
		case more && now.Sub(m.cleanupSaid) >= cleanupProgress:
			// A first cleanup after Retention was lowered can take hours.
			m.cleanupSaid = now
			m.r.log.Info("txbox relay: cleanup going on", "deleted", m.cleaned, "for", now.Sub(m.cleanupStarted).Round(time.Second))
		}
		if !more {
			m.cleanupCutoff = time.Time{}
			m.cleanupAt = now.Add(m.r.cfg.test.CleanupInterval)
		}
	}
	return !m.cleanupCutoff.IsZero()
}

func (g *Group) emit(k GroupEventKind, m *member, rows int, err error) {
	if g.cfg.OnEvent != nil {
		g.cfg.OnEvent(GroupEvent{Kind: k, Store: m.name, Database: m.db.name, Busy: m.db.busy, Rows: rows, Err: err})
	}
}
