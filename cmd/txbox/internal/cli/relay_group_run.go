package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relayseam"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/supervise"
)

// newSupervisor returns the supervisor of the relay's stores: it opens
// their databases (migrating their tables with --migrate) and builds each
// store's relay on the publisher pub returns, the broker connection of now.
func newSupervisor(log *slog.Logger, f *relayFlags, specs []storeSpec, base relay.Config, budget int, pub func() txbox.Publisher) (*supervise.Supervisor, error) {
	var once sync.Once
	cfg := supervise.Config{
		Stores: supervisedStores(specs),
		Open: func(ctx context.Context, raw string) (supervise.Database, error) {
			t, err := parseDB(raw)
			if err != nil {
				return nil, err
			}
			db, err := openTarget(ctx, t, f.migrate)
			if err != nil {
				return nil, err
			}
			return &storeDB{db: db, newRelay: func(s supervise.Store) (*relay.Relay, error) {
				cfg := base
				cfg.Schema, cfg.Table, cfg.Logger = s.Schema, s.Table, log
				if f.served != nil {
					cfg.Observer = f.served.storeObserver(s.Name)
				}
				rl, err := db.relay(pub(), cfg, f.claimTables, f.claimRetention)
				if err == nil {
					once.Do(func() {
						c := rl.Config()
						log.Info("relay settings", "poll_interval", c.PollInterval, "batch_size", c.BatchSize,
							"retention", c.Retention, "max_attempts", c.MaxAttempts, "publish_timeout", c.PublishTimeout)
					})
				}
				return rl, err
			}}, nil
		},
		Retryable: dbRetryable,
		Describe: func(raw string) string {
			if t, err := parseDB(raw); err == nil {
				return t.String()
			}
			return "(a database)"
		},
		Group:      relay.GroupConfig{DatabaseBudget: budget, Logger: log},
		Logger:     log,
		RetryFirst: StartRetryFirst,
		RetryMax:   StartRetryMax,
	}
	if f.migrate {
		cfg.Prepare = func(ctx context.Context, db supervise.Database, s supervise.Store) error {
			return migrateStore(ctx, log, db.(*storeDB).db, s)
		}
	}
	return supervise.New(cfg)
}

func supervisedStores(specs []storeSpec) []supervise.Store {
	out := make([]supervise.Store, len(specs))
	for i, s := range specs {
		out[i] = supervise.Store{Name: s.Name, Database: s.DB, Schema: s.Schema, Table: s.Table}
	}
	return out
}

// storeDB is a database of the relay's stores, for the supervisor.
type storeDB struct {
	db       *database
	newRelay func(supervise.Store) (*relay.Relay, error)
}

func (d *storeDB) Relay(s supervise.Store) (*relay.Relay, error) { return d.newRelay(s) }
func (d *storeDB) Transient(err error) bool                      { return d.db.transient(err) }
func (d *storeDB) Close() error                                  { d.db.Close(); return nil }

// groupWith runs the supervisor's stores on br until ctx ends (nil), the
// publisher closes for good (txbox.ErrPublisherClosed) or no store can run.
// On a signal from reload, load lists the stores again: those removed,
// changed or left out leave the group, those added, changed or left out
// join it; a list that does not load leaves the stores as they were.
func groupWith(ctx context.Context, log *slog.Logger, out io.Writer, f *relayFlags, sup *supervise.Supervisor,
	br *broker, budget int, stopTimeout time.Duration, reload <-chan os.Signal, load func() ([]storeSpec, error)) error {
	// Stopped by Stop below, once the stats have seen its relays.
	if err := sup.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	log.Info("relay started", append([]any{"stores", len(sup.States()), "broker", br.desc}, append(publisherAttrs(br.pub), "db_budget", budget)...)...)
	var tick <-chan time.Time
	if f.statsInterval > 0 {
		t := time.NewTicker(f.statsInterval)
		defer t.Stop()
		tick = t.C
	}
	stats := &groupStats{out: out}
	var stop error // why the loop ends early: the publisher closed
loop:
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping relay", "cause", context.Cause(ctx))
			break loop
		case <-sup.Stopped():
			stats.print(sup)
			if err := sup.Err(); err != nil {
				return err
			}
			return nil
		case <-reload:
			specs, err := load()
			if err != nil {
				log.Error("reload of --stores refused; the stores run as they were", "err", err)
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, stopTimeout)
			if err := sup.SetStores(sctx, supervisedStores(specs)); err != nil {
				log.Warn("reload of --stores", "err", err)
			}
			cancel()
			f.served.reloaded(specs)
			log.Info("reloaded --stores", "stores", len(specs))
		case <-br.closed:
			stop = fmt.Errorf("%w: the NATS connection is closed: %v", txbox.ErrPublisherClosed, br.nc.LastError())
			break loop
		case <-tick:
			stats.print(sup)
		}
	}
	stats.track(sup)
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := sup.Stop(sctx); err != nil {
		return errors.New("relay did not stop in time")
	}
	if f.statsInterval > 0 {
		stats.print(sup)
	}
	if stop != nil {
		return stop
	}
	if err := sup.Err(); err != nil {
		return err
	}
	log.Info("relay stopped")
	return nil
}

// groupStopTimeout bounds the wait for the group's rounds in flight.
func groupStopTimeout(base relay.Config) time.Duration {
	return cmp.Or(base.PublishTimeout, relay.DefaultPublishTimeout) + 10*time.Second
}

// groupStats prints the stats line of a relay with several stores: the
// sums of its running stores' counters.
type groupStats struct {
	out    io.Writer
	last   int64
	relays []*relay.Relay // those running at the last print
}

// print sums the counters of the stores running now, or, once the
// supervisor has stopped, of those that ran when it was last looked at
// (see track).
func (s *groupStats) print(sup *supervise.Supervisor) {
	s.track(sup)
	running := s.relays
	var st relay.Stats
	n := len(running)
	for _, r := range running {
		c := relayseam.CountersOf(r)
		st.Published += c.Published
		st.Rejected += c.Rejected
		st.Dead += c.Dead
		st.Rounds += c.Rounds
		st.FailedRounds += c.FailedRounds
	}
	fmt.Fprintf(s.out, "relay: %d stores: published %d (+%d), rejected %d, dead %d, rounds %d (failed %d)\n",
		n, st.Published, st.Published-s.last, st.Rejected, st.Dead, st.Rounds, st.FailedRounds)
	s.last = st.Published
}

// track records the relays of the stores running now, if any (a stopped
// supervisor has dropped them).
func (s *groupStats) track(sup *supervise.Supervisor) {
	var running []*relay.Relay
	for _, ss := range sup.States() {
		if ss.Relay != nil {
			running = append(running, ss.Relay)
		}
	}
	if len(running) > 0 {
		s.relays = running
	}
}
