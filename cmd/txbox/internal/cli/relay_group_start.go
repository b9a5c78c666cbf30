package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox/internal/backoff"
)

// storeStarts is the set of a relay's stores, and opens their databases
// in the background, one goroutine per database, so that a database down
// at start holds up its own stores only: a store is ready to join the
// group once its database is open (and, with --migrate, its table
// migrated). A database that refuses for good (bad credentials, no such
// database) or a table that cannot be migrated or is not migrated leaves
// its stores out until the relay restarts or reloads --stores; the relay
// exits when every store is left out. Stores are added and dropped while
// it runs (a reload of --stores).
type storeStarts struct {
	ctx     context.Context // the openers'
	log     *slog.Logger
	migrate bool

	mu      sync.Mutex
	specs   []storeSpec         // the stores, in order
	dbs     map[string]*dbState // by dbKey, while a store uses it
	ready   map[string]bool     // store name → its database open and its table migrated
	why     map[string]error    // store name → why it does not run yet
	leftOut map[string]bool     // stores that will not run
	changed chan struct{}       // a store got ready or was left out (cap 1)
	wg      sync.WaitGroup
}

// dbState is one database of the stores: opening until db is set.
type dbState struct {
	db *database
}

// errNotOpenYet is a store's state before its database's first try ends.
var errNotOpenYet = errors.New("its database is being opened")

func startStores(ctx context.Context, log *slog.Logger, specs []storeSpec, migrate bool) *storeStarts {
	s := &storeStarts{ctx: ctx, log: log, migrate: migrate, dbs: map[string]*dbState{}, ready: map[string]bool{},
		why: map[string]error{}, leftOut: map[string]bool{}, changed: make(chan struct{}, 1)}
	s.add(specs)
	return s
}

// add adds stores (whose names are not in the set) and starts what they
// need: their database's opener, or their preparation if it is open.
func (s *storeStarts) add(specs []storeSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range specs {
		s.specs = append(s.specs, sp)
		s.why[sp.Name] = errNotOpenYet
		key := dbKey(sp.target)
		switch st := s.dbs[key]; {
		case st == nil:
			st = &dbState{}
			s.dbs[key] = st
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.open(key, st)
			}()
		case st.db != nil:
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.prepare(sp, st.db)
			}()
		}
	}
}

// drop takes the named stores out of the set (the group must have removed
// them) and closes the databases no store uses any more.
func (s *storeStarts) drop(names []string) {
	var unused []*database
	defer func() { // outside the lock: a pool's Close waits for its connections
		for _, db := range unused {
			db.Close()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.specs = slices.DeleteFunc(s.specs, func(sp storeSpec) bool { return slices.Contains(names, sp.Name) })
	for _, name := range names {
		delete(s.ready, name)
		delete(s.why, name)
		delete(s.leftOut, name)
	}
	for key, st := range s.dbs {
		if slices.ContainsFunc(s.specs, func(sp storeSpec) bool { return dbKey(sp.target) == key }) {
			continue
		}
		if st.db != nil {
			unused = append(unused, st.db)
		}
		delete(s.dbs, key) // an opener still trying sees it and gives up
	}
}

// order puts the stores in the order of specs (a reload's list).
func (s *storeStarts) order(specs []storeSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slices.SortStableFunc(s.specs, func(a, b storeSpec) int {
		return cmp.Compare(slices.IndexFunc(specs, func(sp storeSpec) bool { return sp.Name == a.Name }),
			slices.IndexFunc(specs, func(sp storeSpec) bool { return sp.Name == b.Name }))
	})
}

// current returns the stores, in order.
func (s *storeStarts) current() []storeSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.specs)
}

// diff compares the set with specs, a new list of the stores: it returns
// the names to drop (gone, changed, or left out) and the stores to add
// (new, changed, or left out: a reload tries again a store whose database
// or table has been fixed since).
func (s *storeStarts) diff(specs []storeSpec) (drop []string, add []storeSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, old := range s.specs {
		i := slices.IndexFunc(specs, func(sp storeSpec) bool { return sp.Name == old.Name })
		if i < 0 || !sameStore(specs[i], old) || s.leftOut[old.Name] {
			drop = append(drop, old.Name)
		}
	}
	for _, sp := range specs {
		if slices.Contains(drop, sp.Name) || !slices.ContainsFunc(s.specs, func(old storeSpec) bool { return old.Name == sp.Name }) {
			add = append(add, sp)
		}
	}
	return drop, add
}

func sameStore(a, b storeSpec) bool {
	return a.Name == b.Name && a.DB == b.DB && a.Schema == b.Schema && a.Table == b.Table
}

// open opens the database key for its stores, and retries while the
// failure may go away by itself; it gives up when no store uses it.
func (s *storeStarts) open(key string, st *dbState) {
	ctx := s.ctx
	var wait time.Duration
	for try := 1; ; try++ {
		stores := s.storesOf(key, st)
		if stores == nil {
			return // dropped
		}
		t := stores[0].target
		what := "database " + t.String()
		db, err := openTarget(ctx, t, s.migrate)
		if err == nil {
			if try > 1 {
				s.log.Info(what+" reached", "tries", try, "stores", storeNames(stores))
			}
			s.mu.Lock()
			if s.dbs[key] != st {
				s.mu.Unlock()
				db.Close()
				return
			}
			st.db = db
			stores = s.storesOfLocked(key)
			s.mu.Unlock()
			for _, sp := range stores {
				s.prepare(sp, db)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !dbRetryable(err) {
			s.mu.Lock()
			if s.dbs[key] == st {
				delete(s.dbs, key) // a reload that adds its stores again tries again
			}
			s.mu.Unlock()
			s.leaveOut(stores, err)
			return
		}
		wait = backoff.Next(wait, StartRetryFirst, StartRetryMax)
		s.log.Warn(what+" unreachable; its stores wait for it, the others run; trying again",
			"stores", storeNames(stores), "try", try, "retry_in", wait, "err", err)
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
func (s *storeStarts) storesOf(key string, st *dbState) []storeSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dbs[key] != st {
		return nil
	}
	return s.storesOfLocked(key)
}

func (s *storeStarts) storesOfLocked(key string) []storeSpec {
	var out []storeSpec
	for _, sp := range s.specs {
		if dbKey(sp.target) == key {
			out = append(out, sp)
		}
	}
	return out
}

// prepare migrates sp's table on db when asked (trying again while the
// failure may go away), then marks the store ready to join.
func (s *storeStarts) prepare(sp storeSpec, db *database) {
	var wait time.Duration
	for s.migrate {
		err := migrateStore(s.ctx, s.log, db, sp)
		if err == nil || s.ctx.Err() != nil {
			break
		}
		if !db.transient(err) {
			s.leaveOut([]storeSpec{sp}, err)
			return
		}
		wait = backoff.Next(wait, StartRetryFirst, StartRetryMax)
		s.log.Warn("migration failed; trying again", "store", sp.Name, "retry_in", wait, "err", err)
		s.setWhy([]storeSpec{sp}, fmt.Errorf("waiting to migrate its table: %w", err))
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
		if !s.has(sp) {
			return
		}
	}
	s.mu.Lock()
	if slices.ContainsFunc(s.specs, func(o storeSpec) bool { return sameStore(o, sp) }) {
		s.ready[sp.Name] = true
	}
	s.mu.Unlock()
	s.signal()
}

// has reports whether sp is still one of the stores.
func (s *storeStarts) has(sp storeSpec) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.specs, func(o storeSpec) bool { return sameStore(o, sp) })
}

// leaveOut records that stores will not run, and why (those still in the
// set: a reload may have dropped them meanwhile).
func (s *storeStarts) leaveOut(stores []storeSpec, err error) {
	s.mu.Lock()
	stores = slices.DeleteFunc(slices.Clone(stores), func(sp storeSpec) bool {
		return !slices.ContainsFunc(s.specs, func(o storeSpec) bool { return sameStore(o, sp) })
	})
	for _, sp := range stores {
		s.why[sp.Name] = fmt.Errorf("not running until the relay restarts or reloads --stores: %w", err)
		s.leftOut[sp.Name] = true
	}
	s.mu.Unlock()
	if len(stores) == 0 {
		return
	}
	s.log.Error("stores left out: they will not run until the relay restarts or reloads --stores (SIGHUP); the others run",
		"stores", storeNames(stores), "err", err)
	s.signal()
}

func (s *storeStarts) setWhy(stores []storeSpec, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range stores {
		if _, ok := s.why[sp.Name]; ok {
			s.why[sp.Name] = err
		}
	}
}

// running records that the named store runs.
func (s *storeStarts) running(name string) {
	s.mu.Lock()
	delete(s.why, name)
	s.mu.Unlock()
}

func (s *storeStarts) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// db returns the open database of sp if sp is ready to join, or nil.
func (s *storeStarts) db(sp storeSpec) *database {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready[sp.Name] {
		return nil
	}
	if st := s.dbs[dbKey(sp.target)]; st != nil {
		return st.db
	}
	return nil
}

// wait returns why the named store does not run, or nil when it runs.
func (s *storeStarts) wait(name string) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.why[name]
}

// isLeftOut reports whether the named store will not run.
func (s *storeStarts) isLeftOut(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leftOut[name]
}

// allLeftOut returns an error when no store will ever run.
func (s *storeStarts) allLeftOut() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.specs) == 0 || slices.ContainsFunc(s.specs, func(sp storeSpec) bool { return !s.leftOut[sp.Name] }) {
		return nil
	}
	var errs []error
	for _, sp := range s.specs {
		errs = append(errs, fmt.Errorf("store %q: %w", sp.Name, s.why[sp.Name]))
	}
	return fmt.Errorf("no store can run:\n%w", errors.Join(errs...))
}

// close waits for the openers (ctx must have ended) and closes the
// databases.
func (s *storeStarts) close() {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.dbs {
		if st.db != nil {
			st.db.Close()
		}
	}
	s.dbs = map[string]*dbState{}
}

func storeNames(stores []storeSpec) string {
	names := make([]string, len(stores))
	for i, sp := range stores {
		names[i] = sp.Name
	}
	return strings.Join(names, ",")
}

// joiner is what groupWith knows of the stores it added, and of those
// whose adding failed for a while: when to try again.
type joiner struct {
	in      []string
	retryAt map[string]time.Time
	wait    map[string]time.Duration
}

func (j *joiner) added(name string) bool { return slices.Contains(j.in, name) }

// forget records that the named store left the group.
func (j *joiner) forget(name string) {
	j.in = slices.DeleteFunc(j.in, func(n string) bool { return n == name })
	delete(j.retryAt, name)
	delete(j.wait, name)
}

func (j *joiner) join(name string) {
	j.in = append(j.in, name)
	delete(j.retryAt, name)
	delete(j.wait, name)
}

// failed records a failed try and returns the wait before the next.
func (j *joiner) failed(name string) time.Duration {
	w := backoff.Next(j.wait[name], StartRetryFirst, StartRetryMax)
	j.wait[name], j.retryAt[name] = w, time.Now().Add(w)
	return w
}

// earliest returns the earlier of a and b, a zero time being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
