package supervise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/relay"
)

// Store is one outbox table of a Supervisor.
type Store struct {
	// Name identifies the store in the group, its logs and States.
	// Required; unique among the stores.
	Name string
	// Database is given to Config.Open; stores with the same Database share
	// one open Database. It is never logged: Config.Describe names it.
	Database string
	// Schema and Table name the outbox table, as in relay.Config.
	Schema string
	Table  string
}

// Database is one open database, shared by its stores.
type Database interface {
	// Relay returns a relay (from relay.New, not started) of store s's
	// outbox table; the supervisor adds it to its group.
	Relay(s Store) (*relay.Relay, error)
	// Transient reports whether err, from Config.Prepare or from adding a
	// store of this database to the group, may go away by itself (see
	// txboxdriver.IsTransientFor).
	Transient(err error) bool
	// Close closes the database; the supervisor calls it once no store
	// uses the database, and in Close.
	Close() error
}

// Config configures a Supervisor. Zero fields take their defaults.
type Config struct {
	// Stores are the stores at start; SetStores changes them.
	Stores []Store
	// Open opens and checks (pings) a store's database. Required.
	Open func(ctx context.Context, database string) (Database, error)
	// Retryable reports whether an error of Open may go away by itself (a
	// server down or restarting), so that Open is tried again; otherwise
	// the database's stores are left out. Default: every error is.
	Retryable func(err error) bool
	// Prepare, if set, readies a store's table once its database is open
	// and before the store joins (txbox relay --migrate migrates it). An
	// error that Database.Transient accepts is retried; any other leaves
	// the store out.
	Prepare func(ctx context.Context, db Database, s Store) error
	// Describe names a store's database in logs and errors, without its
	// password. Default: a URL without its password, the part after the
	// last "@" of anything else.
	Describe func(database string) string
	// Group configures the relay.Group the stores run in (its budget per
	// database, its logger). Its Logger defaults to Logger.
	Group relay.GroupConfig
	// Logger receives the supervisor's events. Default: slog.Default().
	Logger *slog.Logger
	// RetryFirst and RetryMax bound the wait between tries to open a
	// database, prepare a table or add a store: RetryFirst, doubling, at
	// most RetryMax. Defaults: DefaultRetryFirst, DefaultRetryMax.
	RetryFirst, RetryMax time.Duration
}

// Defaults of Config.
const (
	DefaultRetryFirst = 100 * time.Millisecond
	DefaultRetryMax   = 5 * time.Second
)

var (
	// ErrNoStoreRuns is the error (wrapped, with each store's reason) that
	// stops a supervisor when every store is left out.
	ErrNoStoreRuns = errors.New("no store can run")
	// ErrNotOpenYet is a store's reason for not running before the first
	// try to open its database has ended.
	ErrNotOpenYet = errors.New("its database is being opened")
)

// State is where a store stands.
type State uint8

// The states of a store.
const (
	// Waiting: for its database to open, its table to be prepared, or to
	// be added to the group again after a failure.
	Waiting State = iota
	// Running: in the group.
	Running
	// LeftOut: it will not run until SetStores lists it again.
	LeftOut
)

func (s State) String() string {
	switch s {
	case Running:
		return "running"
	case LeftOut:
		return "left_out"
	}
	return "waiting"
}

// StoreState is a store and where it stands.
type StoreState struct {
	Store Store
	State State
	// Err says why the store does not run (nil when Running).
	Err error
	// Relay is the store's relay while it runs, else nil.
	Relay *relay.Relay
}

// Supervisor runs the relays of a list of stores in one relay.Group,
// opening their databases in the background. Build it with New.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	life    sync.Mutex    // Start, Stop, Close
	stopReq chan struct{} // closed by Stop
	done    chan struct{} // closed while not running
	err     error

	op sync.Mutex // serializes the group's changes (joins, SetStores)

	mu      sync.Mutex
	g       *relay.Group    // while running
	ctx     context.Context // the run's, for the openers; nil while not running
	wg      sync.WaitGroup  // the openers
	stores  []Store         // in order
	dbs     map[string]*dbState
	ready   map[string]bool  // store name → its database open, its table prepared
	why     map[string]error // store name → why it does not run
	leftOut map[string]bool
	relays  map[string]*relay.Relay // the stores in the group
	retryAt map[string]time.Time    // store name → the next try to add it
	wait    map[string]time.Duration
	changed chan struct{} // a store got ready or was left out (cap 1)
}

// dbState is one database of the stores: opening until db is set.
type dbState struct {
	db      Database
	opening bool
}

// New checks cfg and returns a Supervisor of cfg.Stores; it opens nothing
// (see Start).
func New(cfg Config) (*Supervisor, error) {
	if cfg.Open == nil {
		return nil, fmt.Errorf("%w: supervise: Open is required", txbox.ErrInvalidConfig)
	}
	if err := checkStores(cfg.Stores); err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Group.Logger == nil {
		cfg.Group.Logger = cfg.Logger
	}
	if _, err := relay.NewGroup(cfg.Group); err != nil {
		return nil, err
	}
	cfg.RetryFirst = cmp.Or(cfg.RetryFirst, DefaultRetryFirst)
	cfg.RetryMax = max(cmp.Or(cfg.RetryMax, DefaultRetryMax), cfg.RetryFirst)
	if cfg.Retryable == nil {
		cfg.Retryable = func(error) bool { return true }
	}
	if cfg.Describe == nil {
		cfg.Describe = describe
	}
	done := make(chan struct{})
	close(done)
	s := &Supervisor{cfg: cfg, log: cfg.Logger, done: done, dbs: map[string]*dbState{}, ready: map[string]bool{},
		why: map[string]error{}, leftOut: map[string]bool{}, relays: map[string]*relay.Relay{},
		retryAt: map[string]time.Time{}, wait: map[string]time.Duration{}, changed: make(chan struct{}, 1)}
	s.addLocked(cfg.Stores)
	return s, nil
}

// describe is the default Config.Describe.
func describe(db string) string {
	if u, err := url.Parse(db); err == nil && u.Scheme != "" && u.Host != "" {
		return u.Redacted()
	}
	if i := strings.LastIndexByte(db, '@'); i >= 0 {
		return db[i+1:]
	}
	return db
}

// checkStores refuses a store without a name, or two of one name.
func checkStores(stores []Store) error {
	seen := map[string]bool{}
	for i, s := range stores {
		if s.Name == "" {
			return fmt.Errorf("%w: supervise: store %d has no name", txbox.ErrInvalidConfig, i+1)
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: supervise: two stores are named %q", txbox.ErrInvalidConfig, s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// Start opens the stores' databases not open yet, in the background,
// starts a relay.Group and adds each store to it once ready. It runs until
// Stop, until ctx ends, until the group stops by itself (its publisher
// closed for good: Err wraps txbox.ErrPublisherClosed) or until every
// store is left out (Err wraps ErrNoStoreRuns). On a running supervisor it
// returns relay.ErrAlreadyStarted.
func (s *Supervisor) Start(ctx context.Context) error {
	s.life.Lock()
	defer s.life.Unlock()
	select {
	case <-s.done:
	default:
		return relay.ErrAlreadyStarted
	}
	g, err := relay.NewGroup(s.cfg.Group)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	if err := g.Start(rctx); err != nil {
		cancel()
		return err
	}
	s.stopReq, s.done, s.err = make(chan struct{}), make(chan struct{}), nil
	s.mu.Lock()
	s.g, s.ctx = g, rctx
	for key, st := range s.dbs {
		switch {
		case st.db == nil && !st.opening:
			s.startOpenLocked(key, st)
		case st.db != nil:
			for _, sp := range s.storesOfLocked(key) {
				if !s.ready[sp.Name] && !s.leftOut[sp.Name] {
					s.startPrepareLocked(sp, st.db)
				}
			}
		}
	}
	s.mu.Unlock()
	go s.loop(rctx, cancel, g, s.stopReq, s.done)
	return nil
}

// Stop asks the supervisor to stop and waits until it has (the group's
// rounds in flight finished), or until ctx ends. The databases stay open
// (see Close).
func (s *Supervisor) Stop(ctx context.Context) error {
	s.life.Lock()
	select {
	case <-s.stopReq:
	case <-s.done:
	default:
		close(s.stopReq)
	}
	done := s.done
	s.life.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stopped is closed whenever the supervisor is not running: before Start,
// and once it has stopped.
func (s *Supervisor) Stopped() <-chan struct{} {
	s.life.Lock()
	defer s.life.Unlock()
	return s.done
}

// Err returns the error that stopped the supervisor by itself (wrapping
// txbox.ErrPublisherClosed or ErrNoStoreRuns), once Stopped is closed; nil
// while it runs and after a stop asked by Stop or ctx.
func (s *Supervisor) Err() error {
	s.life.Lock()
	defer s.life.Unlock()
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Close stops the supervisor if it runs and closes the databases it
// opened.
func (s *Supervisor) Close() error {
	_ = s.Stop(context.Background())
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, st := range s.dbs {
		if st.db != nil {
			errs = append(errs, st.db.Close())
			st.db = nil // a Start opens it again
		}
	}
	clear(s.ready)
	return errors.Join(errs...)
}

// loop adds the stores to g as they get ready, until ctx ends, stop is
// closed, g stops by itself or no store can run.
func (s *Supervisor) loop(ctx context.Context, cancel context.CancelFunc, g *relay.Group, stop, done chan struct{}) {
	var retry *time.Timer
	var retryC <-chan time.Time
	rejoin := func() error {
		next, err := s.join(ctx, g)
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
		if !next.IsZero() {
			retry = time.NewTimer(time.Until(next))
			retryC = retry.C
		}
		return err
	}
	err := rejoin()
loop:
	for err == nil {
		select {
		case <-ctx.Done():
			break loop
		case <-stop:
			break loop
		case <-s.changed:
			err = rejoin()
		case <-retryC:
			err = rejoin()
		case <-g.Stopped():
			err = g.Err()
			break loop
		}
	}
	if retry != nil {
		retry.Stop()
	}
	_ = g.Stop(context.Background()) // each round in flight is bounded by its PublishTimeout
	cancel()
	s.op.Lock()
	s.mu.Lock()
	s.g, s.ctx = nil, nil
	clear(s.relays)
	clear(s.retryAt)
	clear(s.wait)
	for _, sp := range s.stores {
		if !s.leftOut[sp.Name] && s.why[sp.Name] == nil {
			s.why[sp.Name] = errors.New("the supervisor is stopped")
		}
	}
	s.mu.Unlock()
	s.op.Unlock()
	s.wg.Wait()
	s.life.Lock()
	s.err = err
	close(done)
	s.life.Unlock()
}

// join adds to g each store that is ready and not in it yet; one whose
// adding failed with a transient error is tried again after a backoff. It
// returns when the next try is due (zero: none), and an error when no
// store can run.
func (s *Supervisor) join(ctx context.Context, g *relay.Group) (time.Time, error) {
	s.op.Lock()
	defer s.op.Unlock()
	var next time.Time
	for _, sp := range s.current() {
		s.mu.Lock()
		_, in := s.relays[sp.Name]
		var db Database
		if st := s.dbs[sp.Database]; st != nil && s.ready[sp.Name] && !in && !s.leftOut[sp.Name] {
			db = st.db
		}
		at := s.retryAt[sp.Name]
		s.mu.Unlock()
		if db == nil {
			continue
		}
		if time.Now().Before(at) {
			next = earliest(next, at)
			continue
		}
		rl, err := db.Relay(sp)
		if err != nil {
			s.leaveOut([]Store{sp}, err)
			continue
		}
		err = g.Add(ctx, relay.Store{Name: sp.Name, Database: s.cfg.Describe(sp.Database), Relay: rl})
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return next, nil
		case db.Transient(err):
			s.mu.Lock()
			w := backoff.Next(s.wait[sp.Name], s.cfg.RetryFirst, s.cfg.RetryMax)
			s.wait[sp.Name], s.retryAt[sp.Name] = w, time.Now().Add(w)
			next = earliest(next, s.retryAt[sp.Name])
			s.mu.Unlock()
			s.log.Warn("store not started; trying again", "store", sp.Name, "retry_in", w, "err", err)
			s.setWhy([]Store{sp}, fmt.Errorf("waiting for its database: %w", err))
			continue
		default:
			s.leaveOut([]Store{sp}, err)
			continue
		}
		s.mu.Lock()
		s.relays[sp.Name] = rl
		delete(s.why, sp.Name)
		delete(s.retryAt, sp.Name)
		delete(s.wait, sp.Name)
		s.mu.Unlock()
		s.log.Info("store added", "store", sp.Name, "db", s.cfg.Describe(sp.Database),
			"schema", cmp.Or(sp.Schema, "(the connection's default)"), "table", cmp.Or(sp.Table, txbox.DefaultTable))
	}
	return next, s.allLeftOut()
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// SetStores replaces the list of stores: those removed, changed or left
// out leave the group (each after its round in flight, bounded by ctx) and
// those added, changed or left out are opened and join it (a store left
// out is tried again: its database or table may have been fixed since).
// A store whose Name, Database, Schema and Table are unchanged keeps
// running. A list with a store without a name, or two of one name, is
// refused and the stores run as they were.
func (s *Supervisor) SetStores(ctx context.Context, stores []Store) error {
	if err := checkStores(stores); err != nil {
		return err
	}
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	var drop []string
	var add []Store
	for _, old := range s.stores {
		i := slices.IndexFunc(stores, func(sp Store) bool { return sp.Name == old.Name })
		if i < 0 || stores[i] != old || s.leftOut[old.Name] {
			drop = append(drop, old.Name)
		}
	}
	for _, sp := range stores {
		if slices.Contains(drop, sp.Name) || !slices.ContainsFunc(s.stores, func(old Store) bool { return old.Name == sp.Name }) {
			add = append(add, sp)
		}
	}
	g := s.g
	s.mu.Unlock()
	var errs []error
	for _, name := range drop {
		s.mu.Lock()
		_, in := s.relays[name]
		s.mu.Unlock()
		if in && g != nil {
			if err := g.Remove(ctx, name); err != nil {
				errs = append(errs, fmt.Errorf("store %q removed before its round ended: %w", name, err))
			}
		}
	}
	s.drop(drop)
	s.mu.Lock()
	s.addLocked(add)
	slices.SortStableFunc(s.stores, func(a, b Store) int {
		return cmp.Compare(slices.IndexFunc(stores, func(sp Store) bool { return sp.Name == a.Name }),
			slices.IndexFunc(stores, func(sp Store) bool { return sp.Name == b.Name }))
	})
	s.mu.Unlock()
	var added, removed []string
	for _, sp := range add {
		added = append(added, sp.Name)
	}
	for _, name := range drop {
		if !slices.Contains(added, name) {
			removed = append(removed, name)
		}
	}
	s.log.Info("stores set", "stores", len(stores), "added_or_changed", strings.Join(added, ","), "removed", strings.Join(removed, ","))
	s.signal()
	return errors.Join(errs...)
}

// addLocked adds stores (whose names are not in the list) and, while
// running, starts what they need: their database's opener, or their
// preparation if it is open.
func (s *Supervisor) addLocked(stores []Store) {
	for _, sp := range stores {
		s.stores = append(s.stores, sp)
		s.why[sp.Name] = ErrNotOpenYet
		st := s.dbs[sp.Database]
		if st == nil {
			st = &dbState{}
			s.dbs[sp.Database] = st
		}
		if s.ctx == nil {
			continue
		}
		switch {
		case st.db == nil && !st.opening:
			s.startOpenLocked(sp.Database, st)
		case st.db != nil:
			s.startPrepareLocked(sp, st.db)
		}
	}
}

// drop takes the named stores out of the list (the group must have
// removed them) and closes the databases no store uses any more.
func (s *Supervisor) drop(names []string) {
	var unused []Database
	defer func() { // outside the lock: a pool's Close waits for its connections
		for _, db := range unused {
			_ = db.Close()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stores = slices.DeleteFunc(s.stores, func(sp Store) bool { return slices.Contains(names, sp.Name) })
	for _, name := range names {
		delete(s.ready, name)
		delete(s.why, name)
		delete(s.leftOut, name)
		delete(s.relays, name)
		delete(s.retryAt, name)
		delete(s.wait, name)
	}
	for key, st := range s.dbs {
		if slices.ContainsFunc(s.stores, func(sp Store) bool { return sp.Database == key }) {
			continue
		}
		if st.db != nil {
			unused = append(unused, st.db)
		}
		delete(s.dbs, key) // an opener still trying sees it and gives up
	}
}

func (s *Supervisor) current() []Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stores)
}

func (s *Supervisor) startOpenLocked(key string, st *dbState) {
	st.opening = true
	ctx := s.ctx
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.open(ctx, key, st)
	}()
}

func (s *Supervisor) startPrepareLocked(sp Store, db Database) {
	ctx := s.ctx
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.prepare(ctx, sp, db)
	}()
}

// open opens database key for its stores, and tries again while the
// failure may go away by itself; it gives up when no store uses it.
func (s *Supervisor) open(ctx context.Context, key string, st *dbState) {
	defer func() {
		s.mu.Lock()
		st.opening = false
		s.mu.Unlock()
	}()
	what := "database " + s.cfg.Describe(key)
	var wait time.Duration
	for try := 1; ; try++ {
		stores := s.storesOf(key, st)
		if stores == nil {
			return // dropped
		}
		db, err := s.cfg.Open(ctx, key)
		if err == nil {
			if try > 1 {
				s.log.Info(what+" reached", "tries", try, "stores", names(stores))
			}
			s.mu.Lock()
			if s.dbs[key] != st {
				s.mu.Unlock()
				_ = db.Close()
				return
			}
			st.db = db
			stores = s.storesOfLocked(key)
			s.mu.Unlock()
			for _, sp := range stores {
				s.prepare(ctx, sp, db)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !s.cfg.Retryable(err) {
			s.mu.Lock()
			if s.dbs[key] == st {
				delete(s.dbs, key) // stores set again try again
			}
			s.mu.Unlock()
			s.leaveOut(stores, err)
			return
		}
		wait = backoff.Next(wait, s.cfg.RetryFirst, s.cfg.RetryMax)
		s.log.Warn(what+" unreachable; its stores wait for it, the others run; trying again",
			"stores", names(stores), "try", try, "retry_in", wait, "err", err)
		s.setWhy(stores, fmt.Errorf("waiting for its database: %w", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// storesOf returns the stores of database key, or nil if st is no longer
// its state (every store of it was dropped).
func (s *Supervisor) storesOf(key string, st *dbState) []Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dbs[key] != st {
		return nil
	}
	return s.storesOfLocked(key)
}

func (s *Supervisor) storesOfLocked(key string) []Store {
	var out []Store
	for _, sp := range s.stores {
		if sp.Database == key {
			out = append(out, sp)
		}
	}
	return out
}

// prepare runs Config.Prepare on sp (trying again while the failure may go
// away), then marks the store ready to join.
func (s *Supervisor) prepare(ctx context.Context, sp Store, db Database) {
	var wait time.Duration
	for s.cfg.Prepare != nil {
		err := s.cfg.Prepare(ctx, db, sp)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if !db.Transient(err) {
			s.leaveOut([]Store{sp}, err)
			return
		}
		wait = backoff.Next(wait, s.cfg.RetryFirst, s.cfg.RetryMax)
		s.log.Warn("preparing the store's table failed; trying again", "store", sp.Name, "retry_in", wait, "err", err)
		s.setWhy([]Store{sp}, fmt.Errorf("waiting to prepare its table: %w", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !s.has(sp) {
			return
		}
	}
	s.mu.Lock()
	if slices.Contains(s.stores, sp) {
		s.ready[sp.Name] = true
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Supervisor) has(sp Store) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.stores, sp)
}

// leaveOut records that stores will not run, and why (those still in the
// list: SetStores may have dropped them meanwhile).
func (s *Supervisor) leaveOut(stores []Store, err error) {
	s.mu.Lock()
	stores = slices.DeleteFunc(slices.Clone(stores), func(sp Store) bool { return !slices.Contains(s.stores, sp) })
	for _, sp := range stores {
		s.why[sp.Name] = fmt.Errorf("not running until its store is set again: %w", err)
		s.leftOut[sp.Name] = true
	}
	s.mu.Unlock()
	if len(stores) == 0 {
		return
	}
	s.log.Error("stores left out: they will not run until they are set again; the others run",
		"stores", names(stores), "err", err)
	s.signal()
}

func (s *Supervisor) setWhy(stores []Store, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range stores {
		if _, ok := s.why[sp.Name]; ok {
			s.why[sp.Name] = err
		}
	}
}

func (s *Supervisor) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// allLeftOut returns an error wrapping ErrNoStoreRuns when every store is
// left out.
func (s *Supervisor) allLeftOut() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.stores) == 0 || slices.ContainsFunc(s.stores, func(sp Store) bool { return !s.leftOut[sp.Name] }) {
		return nil
	}
	var errs []error
	for _, sp := range s.stores {
		errs = append(errs, fmt.Errorf("store %q: %w", sp.Name, s.why[sp.Name]))
	}
	return fmt.Errorf("%w:\n%w", ErrNoStoreRuns, errors.Join(errs...))
}

// States returns the stores, in order, and where each stands.
func (s *Supervisor) States() []StoreState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]StoreState, len(s.stores))
	for i, sp := range s.stores {
		st := StoreState{Store: sp, Relay: s.relays[sp.Name]}
		switch {
		case st.Relay != nil:
			st.State = Running
		case s.leftOut[sp.Name]:
			st.State, st.Err = LeftOut, s.why[sp.Name]
		default:
			st.Err = cmp.Or(s.why[sp.Name], ErrNotOpenYet)
		}
		out[i] = st
	}
	return out
}

// Relay returns the named store's relay while it runs, else nil.
func (s *Supervisor) Relay(name string) *relay.Relay {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.relays[name]
}

// Database returns the open database of the named store once it is ready
// to join (open, its table prepared), else why not.
func (s *Supervisor) Database(name string) (Database, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.stores, func(sp Store) bool { return sp.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("no store is named %q", name)
	}
	if st := s.dbs[s.stores[i].Database]; st != nil && st.db != nil && s.ready[name] {
		return st.db, nil
	}
	return nil, cmp.Or(s.why[name], ErrNotOpenYet)
}

func names(stores []Store) string {
	out := make([]string, len(stores))
	for i, sp := range stores {
		out[i] = sp.Name
	}
	return strings.Join(out, ",")
}
