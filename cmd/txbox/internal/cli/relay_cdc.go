package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// runCDC runs the log-based relay (relay --cdc): the outbox table's
// inserts read from PostgreSQL's WAL through the slot of `txbox slot`.
func runCDC(cmd *cobra.Command, f *relayFlags, log *slog.Logger, cfg relay.Config) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	fs := cmd.Flags()
	switch {
	case len(f.tables.moreDBs) > 0 || f.storesFile != "":
		return fmt.Errorf("%w: --cdc relays one database: one --db, no --stores", txbox.ErrInvalidConfig)
	case f.http != "" || f.ui:
		return fmt.Errorf("%w: --cdc does not serve --http or --ui (see docs/guide/cdc.md, What it does not do)", txbox.ErrInvalidConfig)
	case cfg.DeletePublished:
		return fmt.Errorf("%w: --cdc and --retention 0: the log-based relay never writes a delivered row; cleanup deletes delivered rows after --retention", txbox.ErrInvalidConfig)
	}
	for _, name := range []string{"poll-interval", "claim-lease", "lane-lease", "no-notify"} {
		if fs.Changed(name) {
			log.Warn("--" + name + " has no effect with --cdc")
		}
	}
	target, err := f.tables.target()
	if err != nil {
		return err
	}
	if target.dialect != driver.Postgres {
		return fmt.Errorf("%w: --cdc reads PostgreSQL's write-ahead log; --db is %s", txbox.ErrInvalidConfig, target.dialect)
	}
	ccfg := cdc.Config{Schema: cfg.Schema, Table: cfg.Table, Slot: f.slot.slot, Publication: f.slot.publication,
		BatchSize: cfg.BatchSize, PublishTimeout: cfg.PublishTimeout, MaxAttempts: cfg.MaxAttempts,
		Retention: cfg.Retention, CleanupInterval: cfg.CleanupInterval, Logger: log}
	if _, _, err := ccfg.SlotNames(); err != nil {
		return err
	}
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
		return cdcWith(ctx, log, out, f, db, br, ccfg)
	})
}

// cdcWith runs a log-based relay with br until ctx ends (nil) or the relay
// stops by itself (its error).
func cdcWith(ctx context.Context, log *slog.Logger, out io.Writer, f *relayFlags, db *database, br *broker, ccfg cdc.Config) error {
	pub, err := br.publisher(f.broker.subjectPrefix)
	if err != nil {
		return err
	}
	r, err := cdc.New(db.pool, pub, ccfg)
	if err != nil {
		return err
	}
	ccfg = r.Config()
	if err := r.Start(ctx); err != nil {
		return err
	}
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
		st := r.Stats()
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
