package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// cdcFlags are the settings of the log-based relay alone.
type cdcFlags struct {
	messagePrefix   string
	maxPending      int
	redriveInterval time.Duration
}

func (c *cdcFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.messagePrefix, "message-prefix", "", "with --cdc: read message mode, the logical decoding messages with this prefix that Add writes with txbox.Config.MessagePrefix, instead of the table's inserts; the table holds their dead letters")
	fs.IntVar(&c.maxPending, "max-pending", cdc.DefaultMaxPending, "with --cdc: most messages held unsettled while a parked key waits for its retry; at the bound the relay stops reading the stream until the oldest settle")
	fs.DurationVar(&c.redriveInterval, "redrive-interval", cdc.DefaultRedriveInterval, "with --cdc: how often the reading relay publishes the dead messages txbox dead redrive made pending again")
}

// warnCDCOnly logs the flags of the log-based relay given without --cdc.
func warnCDCOnly(fs *pflag.FlagSet, log *slog.Logger) {
	for _, name := range []string{"slot", "publication", "message-prefix", "max-pending", "redrive-interval"} {
		if fs.Changed(name) {
			log.Warn("--" + name + " has no effect without --cdc")
		}
	}
}

// runCDC runs the log-based relay (relay --cdc): the outbox table's
// inserts read from PostgreSQL's WAL through the slot of `txbox slot`.
func runCDC(cmd *cobra.Command, f *relayFlags, log *slog.Logger, cfg relay.Config) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	fs := cmd.Flags()
	switch {
	case len(f.tables.moreDBs) > 0 || f.storesFile != "":
		return fmt.Errorf("%w: --cdc relays one database: one --db, no --stores", txbox.ErrInvalidConfig)
	case f.ui:
		return fmt.Errorf("%w: --cdc does not serve --ui (see docs/guide/cdc.md, What it does not do)", txbox.ErrInvalidConfig)
	case cfg.Retention == relay.DeletePublished:
		return fmt.Errorf("%w: --cdc and --retention 0: the log-based relay never writes a delivered row; cleanup deletes delivered rows after --retention", txbox.ErrInvalidConfig)
	}
	for _, name := range []string{"poll-interval", "no-notify"} {
		if fs.Changed(name) {
			log.Warn("--" + name + " has no effect with --cdc")
		}
	}
	target, err := f.tables.target()
	if err != nil {
		return err
	}
	if target.dialect != txboxdriver.Postgres {
		return fmt.Errorf("%w: --cdc reads PostgreSQL's write-ahead log; --db is %s", txbox.ErrInvalidConfig, target.dialect)
	}
	ccfg := cdc.Config{Schema: cfg.Schema, Table: cfg.Table, Slot: f.slot.slot, Publication: f.slot.publication,
		BatchSize: cfg.BatchSize, PublishTimeout: cfg.PublishTimeout, MaxAttempts: cfg.MaxAttempts,
		Retention: cfg.Retention, Logger: log, MessagePrefix: f.cdcOpts.messagePrefix,
		MaxPending: f.cdcOpts.maxPending, RedriveInterval: f.cdcOpts.redriveInterval}
	if ccfg.MaxPending < 1 || ccfg.RedriveInterval <= 0 {
		return fmt.Errorf("%w: --max-pending must be 1 or more, --redrive-interval above 0", txbox.ErrInvalidConfig)
	}
	if _, _, err := ccfg.SlotNames(); err != nil {
		return err
	}
	if f.served, err = serveRelayHTTP(ctx, log, f.http, f.httpPublic, false, nil, f.allowed); err != nil {
		return err
	}
	defer f.served.close()
	var current atomic.Pointer[cdc.Relay]
	f.served.cdcProbes(current.Load)
	ccfg.Observer = f.served.observer()
	if err := f.broker.check(); err != nil {
		return err
	}
	f.broker.events = log
	db, err := untilReachable(ctx, log, "database "+target.String(), dbRetryable,
		func(ctx context.Context) (*database, error) { return openTarget(ctx, target, f.migrate) })
	if err != nil || db == nil {
		return err
	}
	defer db.Close()
	if f.migrate {
		tf := f.tables
		tf.log = log
		m, err := db.migrator(tf.migrateConfig())
		if err != nil {
			return err
		}
		if _, err := m.Up(ctx); err != nil {
			return fmt.Errorf("migrate up on %s: %w", db.target, err)
		}
	}
	// A missing or lost slot exits at once, before the broker is waited for.
	if err := cdc.Check(ctx, db.pool, ccfg); err != nil {
		return err
	}
	return reconnecting(ctx, log, out, f, func(br *broker) error {
		return cdcWith(ctx, log, out, f, db, br, ccfg, &current)
	})
}

// cdcWith runs a log-based relay with br until ctx ends (nil) or the relay
// stops by itself (its error).
func cdcWith(ctx context.Context, log *slog.Logger, out io.Writer, f *relayFlags, db *database, br *broker, ccfg cdc.Config, current *atomic.Pointer[cdc.Relay]) error {
	pub := br.pub
	r, err := cdc.New(db.pool, pub, ccfg)
	if err != nil {
		return err
	}
	ccfg = r.Config()
	if err := r.Start(ctx); err != nil {
		return err
	}
	current.Store(r)
	defer current.CompareAndSwap(r, nil)
	log.Info("cdc relay started", "db", db.target.String(), "broker", br.desc, "slot", r.Slot(), "table", ccfg.Table,
		"batch_size", ccfg.BatchSize, "max_attempts", ccfg.MaxAttempts, "publish_timeout", ccfg.PublishTimeout, "retention", ccfg.Retention)
	var tick <-chan time.Time
	if f.statsInterval > 0 {
		t := time.NewTicker(f.statsInterval)
		defer t.Stop()
		tick = t.C
	}
	var last int64
	printStats := func() {
		st, _ := r.Stats(ctx) // a slot that cannot be read shows in /readyz and the log
		fmt.Fprintln(out, cdcStatsLine(r.Slot(), st, st.Published-last))
		last = st.Published
	}
	var closed error
loop:
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping relay", "cause", context.Cause(ctx))
			break loop
		case <-r.Stopped():
			break loop
		case <-br.closed:
			closed = fmt.Errorf("%w: the NATS connection is closed: %v", txbox.ErrPublisherClosed, br.nc.LastError())
			break loop
		case <-tick:
			printStats()
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ccfg.PublishTimeout+10*time.Second)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil {
		return fmt.Errorf("relay did not stop in time: %w", err)
	}
	if f.statsInterval > 0 {
		printStats()
	}
	if err := r.Err(); err != nil {
		return err
	}
	if closed != nil {
		return closed
	}
	log.Info("relay stopped")
	return nil
}

// cdcStatsLine is the log-based relay's progress line.
func cdcStatsLine(slot string, st cdc.Stats, delta int64) string {
	reading := "reading"
	if !st.Reading {
		reading = "waiting (standby, or reconnecting)"
	}
	return fmt.Sprintf("relay --cdc: published %d (+%d), went dead %d; slot %s confirmed %s, %s", st.Published, delta, st.Dead, slot, st.ConfirmedLSN, reading)
}

// cdcProbes serves /readyz for the log-based relay current returns: ready
// while it holds the slot's lease and streams, its slot usable and its
// broker connected (cdc.Stats.Ready); a standby waiting for the lease is
// not ready.
func (h *relayHTTP) cdcProbes(current func() *cdc.Relay) {
	if h == nil {
		return
	}
	probes := health.Handler(h.metricsHandler, func(ctx context.Context) health.Result {
		r := current()
		if r == nil {
			return health.Result{Name: "relay", Error: "no relay is running"}
		}
		st, _ := r.Stats(ctx)
		res := health.Result{Name: "relay", Ready: true, Detail: map[string]any{
			"reading": st.Reading, "broker_connected": st.BrokerConnected, "confirmed_lsn": st.ConfirmedLSN,
			"lag_bytes": st.LagBytes, "published": st.Published, "dead": st.Dead}}
		if err := st.Ready(); err != nil {
			res.Ready, res.Error = false, err.Error()
		}
		return res
	})
	h.probes.Store(&probes)
}
