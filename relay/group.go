package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"

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
// per table. Stores are added and removed while it runs. A Relay run on its
// own (Relay.Start) is a Group of one store: every store of a
// group gets what a lone relay does, and the other way round.
//
// Scheduling: a store with work waits in one queue, first come first
// served, but for a store woken from idle (its doorbell rang, or Wake),
// which goes to the front; a turn runs one Round of the store, then the
// store goes to the back of the queue if the round claimed rows (it may
// have more), or sleeps if it claimed none (until Wake), or for its
// backoff if the round failed (probing meanwhile, see below). An idle
// store's sleeps are its doorbell's looks, then its relay's PollInterval,
// each shortened by a random part of up to half, so that stores gone idle
// together do not queue their looks in one burst. It sleeps only after a
// round that claimed from the table's start with no other round of it in
// flight, and no Wake since that round began; else it looks once more. So
// a store with a large backlog delays another store's rows by at most one
// round of its own: the other store, once queued, is ahead of the
// backlog's next round. A turn starts only while the store's database has
// budget left (GroupConfig.DatabaseBudget), and a database without budget
// does not hold up the stores of others. A look (a turn of an idle store
// whose doorbell is armed, not woken since: its writers' commits ring)
// starts only while it leaves a unit of the budget free, or none is in
// use: a store with work passes the looks of idle stores in the queue
// instead of waiting for them. A store runs up to its relay's
// Concurrency rounds at once while its batches come full, and with
// Concurrency 1 three while its batches come full (one claims while one
// publishes and one is marked) and two while its claims find rows (the
// second's claim overlaps the first round's publish and marks), each such
// round only while it leaves one unit of the database's budget to the
// others; a Relay on its own has the budget for them.
//
// The group opens one LISTEN connection per PostgreSQL database (through
// a driver that is a txboxdriver.ChannelListener, such as txboxpgx), which
// listens on the notify channel of each of that database's stores and
// queues a store as soon as a writer's commit rings its doorbell (armed
// while the store is idle, disarmed at work). While that connection is lost
// (it reconnects with backoff), or with GroupConfig.DisableNotify, an idle
// store polls every PollInterval; Wake queues it at once either way.
// Cleanup runs in the store's turns, when due; the Observer's samples (the
// first as the store is added) and the lane lease heartbeat of a relay
// with Lanes run beside its turns.
//
// A store that fails (its database down, its table dropped) backs off as
// its relay's Config says, its turns meanwhile probing every 500 ms with a
// round of at most one row (which counts against its database's budget),
// while the others flow; while its publisher says it is not connected
// (txbox.ConnectionChecker), its next round comes as soon as it is again.
// A publisher that can never publish again (txbox.ErrPublisherClosed)
// stops the whole group: Stopped is closed and Err returns its error.
type Group struct {
	cfg    GroupConfig
	log    *slog.Logger
	prefix string // of its log lines
	life   lifecycle

	mu      sync.Mutex
	stores  map[string]*member
	queue   []*member // stores waiting for a turn, first come first served
	dbs     map[any]*database
	running bool
	runCtx  context.Context
	fatal   error
	stop    context.CancelFunc
	rounds  sync.WaitGroup
	bg      sync.WaitGroup // the databases' listening connections, the backlog watches
}

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
	return &Group{cfg: c, log: c.Logger, prefix: "txbox relay group", stores: map[string]*member{}, dbs: map[any]*database{}}, nil
}

// ownGroup returns the Group of one store that runs r on its own: its
// budget lets every round of r run (see dispatch), and its logs are r's.
func (r *Relay) ownGroup(ctx context.Context) *Group {
	g := &Group{cfg: GroupConfig{DatabaseBudget: max(r.cfg.test.Concurrency, pipeline) + 1, Logger: r.log}, log: r.log, prefix: "txbox relay",
		stores: map[string]*member{}, dbs: map[any]*database{}}
	m := &member{r: r, round: r.Round, fromStart: r.claimsFromStart, own: true, db: &database{budget: g.cfg.DatabaseBudget}, log: r.log, bell: doorbell{l: r.listen}}
	g.dbs[""] = m.db
	m.channel = g.channelOf(ctx, r, "")
	g.stores[""] = m
	return g
}

// Add validates the store's outbox table (see Relay.Validate), hands its
// relay's Observer, if any, a first sample, and adds the store; in a
// running group its first round is queued at once. A table
// that is missing or not migrated is a *txbox.StartupError and the store
// is not added; so is a database that failed during the check, with its
// error (txboxdriver.IsTransient), not retried: the caller retries the store.
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
	if err := s.Relay.life.hold(); err != nil {
		return fmt.Errorf("store %q: %w", s.Name, err)
	}
	s.Relay.sampleFirst(ctx)
	channel := g.channelOf(ctx, s.Relay, s.Name)

	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.stores[s.Name]; dup {
		s.Relay.life.release()
		return fmt.Errorf("%w: %q", ErrDuplicateStore, s.Name)
	}
	m := &member{name: s.Name, r: s.Relay, round: s.Relay.Round, fromStart: s.Relay.claimsFromStart, db: g.database(s), log: s.Relay.log, channel: channel, bell: doorbell{l: s.Relay.listen}}
	s.Relay.log = s.Relay.log.With("store", s.Name)
	g.stores[s.Name] = m
	if g.running {
		g.start(m)
		g.dispatch()
	}
	return nil
}

// channelOf returns the notify channel r's store listens on in g, or ""
// when it only polls.
func (g *Group) channelOf(ctx context.Context, r *Relay, name string) string {
	l := r.listen
	if l == nil || g.cfg.DisableNotify {
		return ""
	}
	if err := l.resolve(ctx); err != nil {
		attrs := []any{"err", err}
		if name != "" {
			attrs = append(attrs, "store", name)
		}
		r.log.Warn(g.prefix+": no LISTEN/NOTIFY wake-up; polling only", attrs...)
		return ""
	}
	return l.channel
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

// Remove takes the store out of the group and waits until its rounds in
// flight, if any, have finished (acknowledged messages marked, the rest
// released), or until ctx ends. The rounds are not cancelled: each takes at
// most its claim, PublishTimeout and its marks. The relay can then be run
// on its own or added again.
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
	// The rounds in flight are not cancelled: they finish as they would
	// have (claim, publish up to PublishTimeout, marks), so that their
	// rows are marked or released in their own transactions, not by a
	// connection cut mid-claim.
	if m.rounds == 0 {
		g.mu.Unlock()
		g.leave(ctx, m)
		return nil
	}
	m.done = make(chan struct{})
	done := m.done
	g.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave ends m's membership once its last round is over (member.finish),
// and its relay may run elsewhere again. Called without g.mu.
func (g *Group) leave(ctx context.Context, m *member) {
	if m.cancel != nil {
		m.cancel()
	}
	m.finish(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	m.r.running.Store(false)
	m.r.onWake.Store(nil)
	m.r.log = m.log
	m.r.life.release()
	g.emit(EventRemoved, m, 0, nil)
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

// Relay returns the named store's relay (for its Stats).
func (g *Group) Relay(name string) (*Relay, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.stores[name]
	if !ok {
		return nil, false
	}
	return m.r, true
}

// run schedules the stores' rounds until ctx ends, then waits for the
// rounds in flight to finish and returns nil; or it returns the error that
// stopped it (one wrapping txbox.ErrPublisherClosed). A Relay on its own
// runs its Group of one store with it (Relay.Start).
func (g *Group) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := g.begin(ctx, cancel); err != nil {
		return err
	}
	return g.serve(ctx)
}

// Start starts the group's scheduler and returns; the group then runs its
// stores' rounds in the background until Stop or until ctx ends (ctx
// bounds the whole run, not only its start). Stores may be added before
// and while it runs. A publisher that can never publish again stops the
// group by itself: Stopped is then closed and Err says why. A group runs
// once at a time: Start on a running group returns ErrAlreadyStarted.
func (g *Group) Start(ctx context.Context) error {
	return g.life.start(ctx, g.log, g.prefix, g.begin, g.serve)
}

// Stop asks the group to stop and waits until it has (its rounds in
// flight finished: acknowledged messages marked, the rest released), or
// until ctx ends.
func (g *Group) Stop(ctx context.Context) error { return g.life.stop(ctx) }

// Stopped is closed whenever the group is not running: before Start, and
// once it has stopped (by Stop, by ctx, or by itself; see Err).
func (g *Group) Stopped() <-chan struct{} { return g.life.done() }

// Err returns the error that stopped the group by itself (an error
// wrapping txbox.ErrPublisherClosed), once Stopped is closed; nil while it
// runs and after a stop asked by Stop or ctx.
func (g *Group) Err() error { return g.life.failure() }

// begin starts the stores' turns; cancel stops the run.
func (g *Group) begin(ctx context.Context, cancel context.CancelFunc) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running {
		return ErrAlreadyStarted
	}
	g.running, g.runCtx, g.stop, g.fatal = true, ctx, cancel, nil
	for _, m := range g.sorted() {
		g.start(m)
	}
	g.dispatch()
	return nil
}

// serve waits until ctx ends, then for the rounds in flight, and ends the
// stores' runs.
func (g *Group) serve(ctx context.Context) error {
	<-ctx.Done()

	g.mu.Lock()
	g.running = false
	for _, m := range g.stores {
		g.park(m)
		m.cancel()
	}
	g.mu.Unlock()
	g.rounds.Wait()
	g.bg.Wait()
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
		wg.Go(func() { m.finish(ctx) })
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
