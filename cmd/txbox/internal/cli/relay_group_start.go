package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
)

// storeStarts opens the databases of a relay with several stores in the
// background, one goroutine per database, so that a database down at start
// holds up its own stores only: a store joins the group once its database
// is open (and, with --migrate, its table migrated). A database that
// refuses for good (bad credentials, no such database) or a table that
// cannot be migrated or is not migrated leaves its stores out until the
// relay restarts; the relay exits when every store is left out.
type storeStarts struct {
	log     *slog.Logger
	migrate bool

	mu      sync.Mutex
	dbs     map[string]*database // open, by dbKey
	why     map[string]error     // store name → why it does not run yet
	leftOut map[string]bool      // stores that will not run
	stores  int
	changed chan struct{} // a database opened or a store was left out (cap 1)
	wg      sync.WaitGroup
}

// errNotOpenYet is a store's state before its database's first try ends.
var errNotOpenYet = errors.New("its database is being opened")

func startStores(ctx context.Context, log *slog.Logger, specs []storeSpec, migrate bool) *storeStarts {
	s := &storeStarts{log: log, migrate: migrate, dbs: map[string]*database{}, why: map[string]error{},
		leftOut: map[string]bool{}, stores: len(specs), changed: make(chan struct{}, 1)}
	var keys []string
	byDB := map[string][]storeSpec{}
	for _, sp := range specs {
		key := dbKey(sp.target)
		if byDB[key] == nil {
			keys = append(keys, key)
		}
		byDB[key] = append(byDB[key], sp)
		s.why[sp.Name] = errNotOpenYet
	}
	for _, key := range keys {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.open(ctx, key, byDB[key])
		}()
	}
	return s
}

// open opens the database of stores (which share it), migrates their
// tables when asked, and retries while the failure may go away by itself.
func (s *storeStarts) open(ctx context.Context, key string, stores []storeSpec) {
	t := stores[0].target
	what := "database " + t.String()
	var wait time.Duration
	for try := 1; ; try++ {
		db, err := openTarget(ctx, t, s.migrate)
		if err == nil && s.migrate {
			if stores, err = s.migrateAll(ctx, db, stores); err != nil {
				db.Close()
			}
		}
		if err == nil {
			if try > 1 {
				s.log.Info(what+" reached", "tries", try, "stores", storeNames(stores))
			}
			s.mu.Lock()
			s.dbs[key] = db
			s.mu.Unlock()
			s.signal()
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !dbRetryable(err) {
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

// migrateAll migrates the tables of stores on db. A store whose migration
// fails for good is left out; a failure that may go away (the connection
// was lost) is returned, to try again.
func (s *storeStarts) migrateAll(ctx context.Context, db *database, stores []storeSpec) ([]storeSpec, error) {
	var kept []storeSpec
	for _, sp := range stores {
		err := migrateStore(ctx, s.log, db, sp)
		switch {
		case err == nil:
			kept = append(kept, sp)
		case ctx.Err() != nil || transient(err):
			return nil, err
		default:
			s.leaveOut([]storeSpec{sp}, err)
		}
	}
	return kept, nil
}

// leaveOut records that stores will not run, and why.
func (s *storeStarts) leaveOut(stores []storeSpec, err error) {
	s.mu.Lock()
	for _, sp := range stores {
		s.why[sp.Name] = fmt.Errorf("not running until the relay restarts: %w", err)
		s.leftOut[sp.Name] = true
	}
	s.mu.Unlock()
	s.log.Error("stores left out: they will not run until the relay restarts; the others run",
		"stores", storeNames(stores), "err", err)
	s.signal()
}

func (s *storeStarts) setWhy(stores []storeSpec, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range stores {
		s.why[sp.Name] = err
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

// db returns the open database of sp, or nil.
func (s *storeStarts) db(sp storeSpec) *database {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dbs[dbKey(sp.target)]
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
	if len(s.leftOut) < s.stores {
		return nil
	}
	var errs []error
	for name, err := range s.why {
		errs = append(errs, fmt.Errorf("store %q: %w", name, err))
	}
	return fmt.Errorf("no store can run:\n%w", errors.Join(errs...))
}

// close waits for the openers (ctx must have ended) and closes the
// databases.
func (s *storeStarts) close() {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, db := range s.dbs {
		db.Close()
	}
	s.dbs = map[string]*database{}
}

func storeNames(stores []storeSpec) string {
	names := make([]string, len(stores))
	for i, sp := range stores {
		names[i] = sp.Name
	}
	return strings.Join(names, ",")
}

// transient reports whether a failure of a statement (a migration, a
// store's validation) may go away by itself: the connection was lost, the
// server is shutting down or short of resources, a lock or a deadlock. A
// missing table, a missing privilege or a refused setting is not.
func transient(err error) bool {
	var pg *pgconn.PgError
	var my *mysqldrv.MySQLError
	switch {
	case errors.Is(err, txbox.ErrStartup), errors.Is(err, txbox.ErrInvalidConfig):
		return false
	case errors.As(err, &pg):
		switch pg.Code[:2] {
		case "08", "40", "53", "57": // connection, rollback, resources, operator intervention
			return true
		}
		return pg.Code == "55P03" // lock not available
	case errors.As(err, &my):
		switch my.Number {
		case 1040, 1205, 1213, 2006, 2013: // too many connections, lock wait, deadlock, gone away, lost
			return true
		}
		return false
	case strings.Contains(err.Error(), "SQLITE_BUSY"), strings.Contains(err.Error(), "database is locked"):
		return true
	case strings.Contains(err.Error(), "sqlite"):
		return false
	}
	return true // a network error
}

// joiner is what groupWith knows of the stores it added, and of those
// whose adding failed for a while: when to try again.
type joiner struct {
	in      []string
	retryAt map[string]time.Time
	wait    map[string]time.Duration
}

func (j *joiner) added(name string) bool { return slices.Contains(j.in, name) }

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
