package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relayseam"
	"github.com/txbox/txbox/relay"
)

// groupWith runs the group of starts' stores on br until ctx ends (nil),
// the publisher closes for good (txbox.ErrPublisherClosed) or no store can
// run. Each store joins the group once starts has it ready; on a signal
// from reload, load lists the stores again (see groupRun.reload).
func groupWith(ctx context.Context, log *slog.Logger, out io.Writer, f *relayFlags,
	starts *storeStarts, br *broker, base relay.Config, budget int, reload <-chan os.Signal, load func() ([]storeSpec, error)) error {
	pub := br.pub
	g, err := relay.NewGroup(relay.GroupConfig{DatabaseBudget: budget, Logger: log})
	if err != nil {
		return err
	}
	run := &groupRun{ctx: ctx, log: log, f: f, starts: starts, base: base, g: g, pub: pub, relays: map[string]*relay.Relay{},
		j: joiner{retryAt: map[string]time.Time{}, wait: map[string]time.Duration{}}}
	log.Info("relay started", append([]any{"stores", len(starts.current()), "broker", br.desc}, append(publisherAttrs(pub), "db_budget", budget)...)...)
	defer run.clear()

	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	if err := g.Start(gctx); err != nil {
		return err
	}
	go func() { <-g.Stopped(); done <- g.Err() }()
	var tick <-chan time.Time
	if f.statsInterval > 0 {
		t := time.NewTicker(f.statsInterval)
		defer t.Stop()
		tick = t.C
	}
	stats := &groupStats{out: out}
	var stop error // why the loop ends early: the publisher closed, no store can run
	stop = run.rejoin()
	defer run.stopRetry()
loop:
	for stop == nil {
		select {
		case <-ctx.Done():
			log.Info("stopping relay", "cause", context.Cause(ctx))
			break loop
		case <-starts.changed:
			stop = run.rejoin()
		case <-run.retryC():
			run.retry = nil
			stop = run.rejoin()
		case <-reload:
			run.reload(load)
			stop = run.rejoin()
		case err := <-done:
			stats.print(run.relays)
			return err
		case <-br.closed:
			stop = fmt.Errorf("%w: the NATS connection is closed: %v", txbox.ErrPublisherClosed, br.nc.LastError())
		case <-tick:
			stats.print(run.relays)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-time.After(run.stopTimeout()):
		return errors.New("relay did not stop in time")
	}
	if f.statsInterval > 0 {
		stats.print(run.relays)
	}
	if stop != nil {
		return stop
	}
	log.Info("relay stopped")
	return nil
}

// groupRun is the group of one broker connection, and the stores in it.
type groupRun struct {
	ctx    context.Context
	log    *slog.Logger
	f      *relayFlags
	starts *storeStarts
	base   relay.Config
	g      *relay.Group
	pub    txbox.Publisher

	relays         map[string]*relay.Relay // the stores in the group, by name
	j              joiner
	retry          *time.Timer // the next try of a store whose adding failed
	settingsLogged bool
}

// rejoin joins the stores that are ready (see join) and sets the timer of
// the next try.
func (r *groupRun) rejoin() error {
	next, err := r.join()
	r.stopRetry()
	if !next.IsZero() {
		r.retry = time.NewTimer(time.Until(next))
	}
	return err
}

func (r *groupRun) retryC() <-chan time.Time {
	if r.retry == nil {
		return nil
	}
	return r.retry.C
}

func (r *groupRun) stopRetry() {
	if r.retry != nil {
		r.retry.Stop()
		r.retry = nil
	}
}

// stopTimeout bounds the wait for the group's rounds in flight.
func (r *groupRun) stopTimeout() time.Duration {
	return cmp.Or(r.base.PublishTimeout, relay.DefaultPublishTimeout) + 10*time.Second
}

// join adds each store whose database is open and which is not in the
// group yet; one whose table is not migrated is left out, one whose
// database failed again is tried again after a backoff. It returns when
// the next try is due (zero: none), and an error when no store can run.
func (r *groupRun) join() (time.Time, error) {
	var next time.Time
	for _, s := range r.starts.current() {
		if r.j.added(s.Name) || r.starts.isLeftOut(s.Name) {
			continue
		}
		db := r.starts.db(s)
		if db == nil {
			continue
		}
		if at := r.j.retryAt[s.Name]; time.Now().Before(at) {
			next = earliest(next, at)
			continue
		}
		cfg := r.base
		cfg.Schema, cfg.Table = s.Schema, s.Table
		cfg.Logger = r.log
		if r.f.served != nil {
			cfg.Observer = r.f.served.storeObserver(s.Name)
		}
		rl, err := db.relay(r.pub, cfg, r.f.claimTables, r.f.claimRetention)
		if err != nil {
			return next, fmt.Errorf("store %q: %w", s.Name, err)
		}
		err = r.g.Add(r.ctx, relay.Store{Name: s.Name, Database: s.target.String(), Relay: rl})
		switch {
		case err == nil:
		case r.ctx.Err() != nil:
			return next, nil
		case db.transient(err):
			w := r.j.failed(s.Name)
			r.log.Warn("store not started; trying again", "store", s.Name, "retry_in", w, "err", err)
			r.starts.setWhy([]storeSpec{s}, fmt.Errorf("waiting for its database: %w", err))
			next = earliest(next, r.j.retryAt[s.Name])
			continue
		default:
			r.starts.leaveOut([]storeSpec{s}, err)
			continue
		}
		r.j.join(s.Name)
		r.relays[s.Name] = rl
		r.starts.running(s.Name)
		r.f.served.setStore(s.Name, rl)
		r.log.Info("store added", "store", s.Name, "db", s.target.String(), "schema", cmp.Or(s.Schema, "(the connection's default)"), "table", cmp.Or(s.Table, txbox.DefaultTable))
		if !r.settingsLogged {
			r.settingsLogged = true
			c := rl.Config()
			r.log.Info("relay settings", "poll_interval", c.PollInterval, "batch_size", c.BatchSize,
				"retention", c.Retention, "max_attempts", c.MaxAttempts, "publish_timeout", c.PublishTimeout)
		}
	}
	return next, r.starts.allLeftOut()
}

// reload reads the stores again: those removed, changed or left out leave
// the group (each after its round in flight) and the set; those added,
// changed or left out are opened and join at the next rejoin. A list that
// does not load leaves the stores as they were.
func (r *groupRun) reload(load func() ([]storeSpec, error)) {
	specs, err := load()
	if err != nil {
		r.log.Error("reload of --stores refused; the stores run as they were", "err", err)
		return
	}
	drop, add := r.starts.diff(specs)
	for _, name := range drop {
		if rl, ok := r.relays[name]; ok {
			ctx, cancel := context.WithTimeout(r.ctx, r.stopTimeout())
			if err := r.g.Remove(ctx, name); err != nil {
				r.log.Warn("store removed before its round ended", "store", name, "err", err)
			}
			cancel()
			r.f.served.clearStore(rl)
			delete(r.relays, name)
		}
		r.j.forget(name)
	}
	r.starts.drop(drop)
	r.starts.add(add)
	r.starts.order(specs)
	r.f.served.reloaded(specs)
	var added, removed []string
	for _, sp := range add {
		added = append(added, sp.Name)
	}
	for _, name := range drop {
		if !slices.Contains(added, name) {
			removed = append(removed, name)
		}
	}
	r.log.Info("reloaded --stores", "stores", len(specs), "added_or_changed", strings.Join(added, ","), "removed", strings.Join(removed, ","))
}

// clear records that the group's relays no longer run.
func (r *groupRun) clear() {
	for _, rl := range r.relays {
		r.f.served.clearStore(rl)
	}
}

// groupStats prints the stats line of a relay with several stores: the
// sums of its stores' counters.
type groupStats struct {
	out  io.Writer
	last int64
}

func (s *groupStats) print(relays map[string]*relay.Relay) {
	var st relay.Stats
	for _, r := range relays {
		c := relayseam.CountersOf(r)
		st.Published += c.Published
		st.Rejected += c.Rejected
		st.Dead += c.Dead
		st.Rounds += c.Rounds
		st.FailedRounds += c.FailedRounds
	}
	fmt.Fprintf(s.out, "relay: %d stores: published %d (+%d), rejected %d, dead %d, rounds %d (failed %d)\n",
		len(relays), st.Published, st.Published-s.last, st.Rejected, st.Dead, st.Rounds, st.FailedRounds)
	s.last = st.Published
}
