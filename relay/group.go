package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/txbox/txbox"
)

// Errors of a Group.
var (
	// ErrUnknownStore: no store of that name is in the group.
	ErrUnknownStore = errors.New("txbox/relay: no such store in the group")
	// ErrDuplicateStore: a store of that name is in the group already.
	ErrDuplicateStore = errors.New("txbox/relay: a store of that name is in the group")
)

// A Group runs the relays of many outbox tables (stores: tenants, schemas,
// databases) in one process, with one scheduler instead of one set of loops
// per table. Stores are added and removed while it runs.
//
// Scheduling: a store with work waits in one queue, first come first
// served; a turn runs one Round of the store, then the store goes to the
// back of the queue if the round claimed rows (it may have more), or sleeps
// for its relay's PollInterval if it claimed none (or until Wake), or for
// its backoff if the round failed (probing meanwhile, see below). So a
// store with a large backlog delays another store's rows by at most one
// round of its own: the other store, once queued, is ahead of the
// backlog's next round. A turn starts only while the store's database has
// budget left (GroupConfig.DatabaseBudget), and a database without budget
// does not hold up the stores of others.
//
// Each store's relay is built with New as usual (its Config gives its
// batch size, poll interval, retries, observer); its Concurrency and its
// overlapping claim are not used in a group, nor its own LISTEN
// connection: the group opens one per PostgreSQL database instead, which
// listens on the notify channel of each of that database's stores and
// queues a store as soon as a writer's commit rings its doorbell (armed
// and disarmed as the store's own relay would). While that connection is
// lost (it reconnects with backoff), or with GroupConfig.DisableNotify, an
// idle store polls every PollInterval; Wake queues it at once either way.
// Cleanup and the Observer's samples run in the store's turns, when due.
//
// A store that fails (its database down, its table dropped) backs off as
// its relay would, its turns meanwhile probing every 500 ms with a round of
// at most one row (which counts against its database's budget), while the
// others flow. A publisher that can never publish again
// (txbox.ErrPublisherClosed) stops the whole group: Run returns its error.
type Group struct {
	cfg GroupConfig
	log *slog.Logger

	mu      sync.Mutex
	stores  map[string]*member
	queue   []*member // stores waiting for a turn, first come first served
	dbs     map[any]*database
	running bool
	runCtx  context.Context
	fatal   error
	stop    context.CancelFunc
	rounds  sync.WaitGroup

	listeners sync.WaitGroup // the databases' listening connections
}

// member is one store of a Group.
type member struct {
	name string
	r    *Relay
	db   *database
	log  *slog.Logger // the relay's own logger, given back when it leaves

	state   memberState
	again   bool          // woken while its round ran: queue it again after
	removed bool          // Remove was called
	done    chan struct{} // closed when the running round ends
	timer   *time.Timer   // the poll, backoff or probe wait, while idle
	backoff time.Duration
	// While it backs off after a failed round (failed is that round's
	// error), the store's turns are probes (Relay.probe) until retryAt,
	// when a full round is due.
	failed    error
	retryAt   time.Time
	resumedBy string // how the last wait after a failure ended
	ctx       context.Context
	cancel    context.CancelFunc

	cleanupAt, sampleAt time.Time
	sample              txbox.RelaySample
	// A cleanup in progress, one batch a turn: its cutoff (zero: none),
	// the rows it deleted so far, when it began.
	cleanupCutoff  time.Time
	cleaned        int64
	cleanupStarted time.Time

	channel string   // its notify channel; "" when it only polls
	bell    doorbell // touched in its turns only

	// wakeBy says why the store was queued while it backed off ("": its
	// timer): a wake or the broker's reconnect makes the turn a full round.
	wakeBy string
	// stopWatch ends the watch for the publisher's reconnect, if any.
	stopWatch context.CancelFunc
	// services runs the relay's lane lease heartbeat (stopServices).
	services *services
}

type memberState uint8

const (
	idle memberState = iota
	queued
	running
)

// database is one budget: the stores that share a database.
type database struct {
	name   string
	budget int
	busy   int
	listen *dbListener // nil when none of its stores listens
}

// Store is one outbox table of a Group.
type Store struct {
	// Name identifies the store, once, in the group's logs, events and
	// metrics, and in Remove and Wake. Required; unique in the group.
	Name string
	// Database names the budget the store's rounds count against: stores
	// with the same Database share GroupConfig.DatabaseBudget. Default: the
	// relay's pool, so that the stores of one pool share one budget.
	Database string
	// Relay relays the store's table, built by New and not started: the
	// group runs it. A relay is in at most one group.
	Relay *Relay
}

// NewGroup returns an empty Group.
func NewGroup(cfg GroupConfig) (*Group, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Group{cfg: c, log: c.Logger, stores: map[string]*member{}, dbs: map[any]*database{}}, nil
}

// Add validates the store's outbox table (see Relay.Validate) and adds the
// store; in a running group its first round is queued at once. A table
// that is missing or not migrated is a *txbox.StartupError and the store
// is not added; so is a database that failed during the check, with its
// error (driver.IsTransient), not retried: the caller retries the store.
func (g *Group) Add(ctx context.Context, s Store) error {
	if s.Name == "" || s.Relay == nil {
		return fmt.Errorf("%w: a group store needs a name and a relay", txbox.ErrInvalidConfig)
	}
	g.mu.Lock()
	_, dup := g.stores[s.Name]
	g.mu.Unlock()
	if dup {
		return fmt.Errorf("%w: %q", ErrDuplicateStore, s.Name)
	}
	if err := s.Relay.validateOnce(ctx); err != nil {
		return fmt.Errorf("store %q: %w", s.Name, err)
	}
	if err := s.Relay.joinGroup(); err != nil {
		return fmt.Errorf("store %q: %w", s.Name, err)
	}
	var channel string
	if l := s.Relay.listen; l != nil && l.chans != nil && !g.cfg.DisableNotify {
		if err := l.resolve(ctx); err != nil {
			s.Relay.log.Warn("txbox relay group: no LISTEN/NOTIFY wake-up for this store; polling", "store", s.Name, "err", err)
		} else {
			channel = l.channel
		}
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.stores[s.Name]; dup {
		s.Relay.leaveGroup()
		return fmt.Errorf("%w: %q", ErrDuplicateStore, s.Name)
	}
	m := &member{name: s.Name, r: s.Relay, db: g.database(s), log: s.Relay.log, channel: channel, bell: doorbell{l: s.Relay.listen}}
	s.Relay.log = s.Relay.log.With("store", s.Name)
	g.stores[s.Name] = m
	if g.running {
		g.start(m)
		g.dispatch()
	}
	return nil
}

// database returns the budget of s's database, made on first use.
func (g *Group) database(s Store) *database {
	var key any = "name:" + s.Database
	name := s.Database
	if s.Database == "" {
		pool := s.Relay.store.Pool()
		if t := reflect.TypeOf(pool); t != nil && t.Comparable() {
			key = pool
		} else {
			key = "store:" + s.Name
		}
		name = "pool of " + s.Name
	}
	db, ok := g.dbs[key]
	if !ok {
		db = &database{name: name, budget: g.cfg.DatabaseBudget}
		g.dbs[key] = db
	}
	return db
}

// start makes m part of the running group and queues its first round.
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
	now := time.Now()
	m.cleanupAt = now.Add(m.r.cfg.CleanupInterval)
	m.sampleAt = now.Add(m.r.cfg.SampleInterval)
	g.enqueue(m)
	g.subscribe(m)
}

// Remove takes the store out of the group and waits until its round in
// flight, if any, has finished (acknowledged messages marked, the rest
// released), or until ctx ends. The round is not cancelled: it takes at
// most its claim, PublishTimeout and its marks. The relay can then be run on its own or
// added again.
func (g *Group) Remove(ctx context.Context, name string) error {
	g.mu.Lock()
	m, ok := g.stores[name]
	if !ok {
		g.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownStore, name)
	}
	delete(g.stores, name)
	m.removed = true
	g.park(m)
	g.unsubscribe(m)
	var done chan struct{}
	if m.state == running {
		done = m.done
	}
	// The round in flight is not cancelled: it finishes as it would
	// have (claim, publish up to PublishTimeout, marks), so that its
	// rows are marked or released in its own transaction, not by a
	// connection cut mid-claim.
	g.mu.Unlock()
	if done == nil {
		g.leave(ctx, m)
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave ends m's membership once its last round is over: its services
// stop (its lanes are given up), its doorbell is disarmed, and its relay
// may run elsewhere again. Called without g.mu.
func (g *Group) leave(ctx context.Context, m *member) {
	if m.cancel != nil {
		m.cancel()
	}
	m.stopServices(ctx)
	m.bell.release(context.WithoutCancel(ctx))
	g.mu.Lock()
	m.r.running.Store(false)
	m.r.onWake.Store(nil)
	m.r.log = m.log
	m.r.leaveGroup()
	g.emit(EventRemoved, m, 0, nil)
	g.mu.Unlock()
}

// stopServices stops m's services, if they run, and gives its lanes up.
func (m *member) stopServices(ctx context.Context) {
	if m.services != nil {
		m.services.stop(ctx)
		m.services = nil
	}
}

// park takes m out of the queue and stops its wait.
func (g *Group) park(m *member) {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if m.stopWatch != nil {
		m.stopWatch()
		m.stopWatch = nil
	}
	if m.state == queued {
		g.queue = slices.DeleteFunc(g.queue, func(q *member) bool { return q == m })
		m.state = idle
	}
}

// Wake queues the named store for a turn now instead of at the end of its
// poll interval (or its backoff). Call it after committing messages to
// that store, in the same process. It never blocks; an unknown name is
// ignored.
func (g *Group) Wake(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.stores[name]; ok && g.running {
		g.wake(m)
	}
}

func (g *Group) wake(m *member) {
	switch m.state {
	case idle:
		if m.failed != nil {
			m.wakeBy = resumedByWake
		}
		g.park(m)
		g.enqueue(m)
		g.dispatch()
	case running:
		m.again = true
	}
}

// Names returns the names of the group's stores, sorted.
func (g *Group) Names() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]string, 0, len(g.stores))
	for n := range g.stores {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Relay returns the named store's relay (for its Stats, Health, Sample).
func (g *Group) Relay(name string) (*Relay, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.stores[name]
	if !ok {
		return nil, false
	}
	return m.r, true
}

// Run schedules the stores' rounds until ctx ends, then waits for the
// rounds in flight to finish and returns nil; or it returns the error that
// stopped it (one wrapping txbox.ErrPublisherClosed). Stores may be added
// before and while it runs.
func (g *Group) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g.mu.Lock()
	if g.running {
		g.mu.Unlock()
		return ErrAlreadyStarted
	}
	g.running, g.runCtx, g.stop, g.fatal = true, ctx, cancel, nil
	for _, m := range g.sorted() {
		g.start(m)
	}
	g.dispatch()
	g.mu.Unlock()

	<-ctx.Done()

	g.mu.Lock()
	g.running = false
	for _, m := range g.stores {
		g.park(m)
		m.cancel()
	}
	g.mu.Unlock()
	g.rounds.Wait()
	g.listeners.Wait()
	g.mu.Lock()
	ms := g.sorted()
	for _, m := range ms {
		m.r.running.Store(false)
		m.r.notifyActive.Store(false)
		m.r.onWake.Store(nil)
	}
	for _, db := range g.dbs {
		db.listen = nil
	}
	fatal := g.fatal
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			m.stopServices(ctx)
			m.bell.release(context.WithoutCancel(ctx))
		})
	}
	wg.Wait()
	return fatal
}

func (g *Group) sorted() []*member {
	ms := make([]*member, 0, len(g.stores))
	for _, m := range g.stores {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b *member) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return ms
}

func (g *Group) enqueue(m *member) {
	m.state = queued
	g.queue = append(g.queue, m)
	g.emit(EventQueued, m, 0, nil)
}

// dispatch starts the turns of the queued stores whose database has budget
// left, in queue order. Called with g.mu held.
func (g *Group) dispatch() {
	if !g.running {
		return
	}
	kept := g.queue[:0]
	for _, m := range g.queue {
		if m.db.busy >= m.db.budget {
			kept = append(kept, m)
			continue
		}
		m.db.busy++
		m.state = running
		m.again = false
		m.done = make(chan struct{})
		g.emit(EventStarted, m, 0, nil)
		g.rounds.Add(1)
		go g.turn(m)
	}
	clear(g.queue[len(kept):])
	g.queue = kept
}

// turn runs one round of m (and its cleanup or sample when due), then
// decides when m's next turn comes.
func (g *Group) turn(m *member) {
	defer g.rounds.Done()
	ctx := m.ctx
	if m.failed != nil {
		m.resumedBy = cmp.Or(m.wakeBy, resumedByBackoff)
		if m.wakeBy == "" && time.Now().Before(m.retryAt) {
			if err := m.r.probe(ctx, m.failed); err != nil {
				g.settle(ctx, m, 0, err, 0, true)
				return
			}
			m.resumedBy = resumedByProbe
		}
	}
	g.chores(ctx, m)
	n, err := m.r.Round(ctx)
	next := g.ring(ctx, m, n, err)
	g.settle(ctx, m, n, err, next, false)
}

// ring keeps m's doorbell as its relay's own loop does (armed while idle,
// disarmed at work) and returns how long m, idle, waits before its next
// round: 0 for at once.
func (g *Group) ring(ctx context.Context, m *member, n int, err error) time.Duration {
	switch {
	case err != nil || ctx.Err() != nil:
		return m.r.cfg.PollInterval
	case n > 0:
		m.bell.worked(ctx)
		return 0
	case !m.r.Listening():
		return m.r.cfg.PollInterval
	}
	wait, err := m.bell.quiet(ctx, m.r.cfg.PollInterval)
	if err != nil && ctx.Err() == nil {
		m.r.log.Warn("txbox relay: cannot arm the wake-up doorbell; polling", "err", err)
	}
	return wait
}

// settle ends m's turn: it decides when m's next turn comes (next: after
// an idle round), and reports whether m left the group. After a failed
// round, m backs off as its relay would, its turns meanwhile probing every
// probeEvery (probed: this turn was such a probe, and it failed).
func (g *Group) settle(ctx context.Context, m *member, n int, err error, next time.Duration, probed bool) {
	g.mu.Lock()
	m.db.busy--
	m.state = idle
	m.wakeBy = ""
	g.emit(EventFinished, m, n, err)
	if m.removed {
		g.dispatch()
		g.mu.Unlock()
		g.leave(ctx, m)
		close(m.done)
		return
	}
	defer g.mu.Unlock()
	defer g.dispatch()
	close(m.done)
	if !g.running || ctx.Err() != nil {
		return
	}
	conn, _ := m.r.pub.(txbox.ConnectionChecker)
	away := err != nil && conn != nil && !conn.Connected()
	var wait time.Duration
	switch {
	case errors.Is(err, txbox.ErrPublisherClosed):
		m.r.log.Error("txbox relay group: the publisher can never publish again; stopping", "err", err)
		if g.fatal == nil {
			g.fatal = err
		}
		g.stop()
		return
	case probed: // failed: the next probe, or the full round when due
		wait = min(probeEvery, time.Until(m.retryAt))
	case err != nil:
		now := time.Now()
		m.backoff = nextBackoff(m.backoff, m.r.cfg.BackoffMax)
		m.failed, m.retryAt = err, now.Add(m.backoff)
		wait = min(probeEvery, m.backoff)
		m.r.outage.failed(m.r.log, err, m.backoff, away, now)
	case n > 0 || m.again || next == 0 || !m.cleanupCutoff.IsZero():
		g.recovered(m)
		g.enqueue(m)
		return
	default:
		g.recovered(m)
		wait = next
	}
	m.timer = time.AfterFunc(wait, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.running && !m.removed && m.state == idle {
			m.timer = nil
			g.enqueue(m)
			g.dispatch()
		}
	})
	if away {
		g.watchReconnect(m, conn)
	}
}

// watchReconnect queues m, backing off while its publisher is not
// connected, for a full round as soon as it is again (looked at every
// reconnectCheck), as a lone relay's sleep does. Called with g.mu held;
// park ends the watch.
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
			if ctx.Err() == nil && g.running && !m.removed && m.state == idle {
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

// recovered ends m's backoff after a round that succeeded.
func (g *Group) recovered(m *member) {
	m.backoff, m.failed, m.retryAt = 0, nil, time.Time{}
	m.r.outage.ended(m.r.log, m.resumedBy, time.Now())
}

// chores runs m's cleanup and observer sample when they are due, in m's
// turn, so that they count against its database's budget. A cleanup runs
// one statement (CleanupBatchSize rows) a turn, and its store's round
// follows it: a store with a large cleanup to do (the first after its
// Retention was lowered: hours) goes on relaying meanwhile, as a Relay of
// its own does beside its cleanup. Its next turn comes at once while the
// cleanup has more to do (see cleaning).
func (g *Group) chores(ctx context.Context, m *member) {
	now := time.Now()
	if m.cleanupCutoff.IsZero() && now.After(m.cleanupAt) {
		m.cleanupCutoff, m.cleaned, m.cleanupStarted = now.Add(-m.r.cfg.Retention), 0, now
	}
	if !m.cleanupCutoff.IsZero() {
		n, more, err := m.r.cleanupBatch(ctx, m.cleanupCutoff)
		m.cleaned += n
		switch {
		case err != nil && ctx.Err() == nil:
			m.r.log.Warn("txbox relay: cleanup failed", "err", err, "deleted", m.cleaned)
		case err == nil && !more && m.cleaned > 0:
			m.r.log.Info("txbox relay: cleanup", "deleted", m.cleaned, "for", now.Sub(m.cleanupStarted).Round(time.Millisecond))
		}
		if !more {
			m.cleanupCutoff = time.Time{}
			m.cleanupAt = now.Add(m.r.cfg.CleanupInterval)
		}
	}
	if m.r.obs != nil && now.After(m.sampleAt) {
		m.sampleAt = now.Add(m.r.cfg.SampleInterval)
		m.sample = m.r.Sample(ctx, m.sample)
		if ctx.Err() == nil {
			m.r.obs.Sampled(m.sample)
		}
	}
}

func (g *Group) emit(k GroupEventKind, m *member, rows int, err error) {
	if g.cfg.OnEvent != nil {
		g.cfg.OnEvent(GroupEvent{Kind: k, Store: m.name, Database: m.db.name, Busy: m.db.busy, Rows: rows, Err: err})
	}
}

// joinGroup marks r as run by a group: Start then returns
// ErrAlreadyStarted and Stopped stays open until it leaves.
func (r *Relay) joinGroup() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stopped:
	default:
		return ErrAlreadyStarted
	}
	r.stopped = make(chan struct{})
	return nil
}

func (r *Relay) leaveGroup() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stopped:
	default:
		close(r.stopped)
	}
}
