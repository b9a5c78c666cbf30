package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxkafka"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// DefaultStatsInterval is how often the relay command prints a stats line.
const DefaultStatsInterval = 10 * time.Second

type relayFlags struct {
	tables tableFlags
	broker brokerFlags

	pollInterval   time.Duration
	batchSize      int
	retention      time.Duration
	maxAttempts    int
	publishTimeout time.Duration
	claimTables    []string      // --claim-check-table
	claimRetention time.Duration // --claim-check-retention

	noNotify      bool
	statsInterval time.Duration

	// --cdc (relay_cdc.go)
	cdc     bool
	slot    slotFlags
	cdcOpts cdcFlags

	// several stores (relay_group.go)
	storesFile string
	dbBudget   int
	migrate    bool
	logLevel   string
	logJSON    bool

	// --http (relay_http.go)
	http        string
	httpPublic  bool
	ui          bool
	uiToken     string
	inboxTables []string
	allowed     []string // --allowed-host
	served      *relayHTTP
}

func newRelayCmd() *cobra.Command {
	var f relayFlags
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run the relay: deliver committed outbox rows to the broker",
		Long: `Run the relay daemon: claim committed rows of the outbox table in batches,
publish them to NATS JetStream (subject = topic, Nats-Msg-Id = message id) and
mark them delivered, until SIGINT or SIGTERM; then finish or release the batch
in flight and exit 0. Any number of relays may run on one database.

A database or broker that cannot be reached at start is waited for: each try
is logged, with waits from 100ms doubling to 5s. A wrong setting (bad
credentials, a database or stream that does not exist) and an outbox table
that is missing or not migrated exit 1 at once. While the broker is away the
relay retries, and resumes within about a second of its return; a NATS
connection the server closed for good is built anew.

Settings come from the flags, else from the TXBOX_* environment variables,
else from the defaults shown. A bad value is an error at start.

With no --broker, an embedded NATS server with JetStream is started (data in
--nats-dir, listening on --nats-listen); unless --stream or --stream-subjects
say otherwise, topics get the prefix "txbox." and the stream TXBOX captures
"txbox.>". Logs go to stderr; a stats line goes to stdout every
--stats-interval.

Several stores (--db repeated, or --stores FILE) run in one process: each
store starts as soon as its own database answers, and one that can never
start (bad credentials, no such database or table) is left out while the
others run. With --stores, SIGHUP reads the file again: stores added, removed
or changed join or leave without a restart.`,
		Example: `  txbox relay --db postgres://app@localhost:5432/app --broker nats://localhost:4222
  txbox relay --migrate                              # SQLite txbox.db + embedded NATS
  TXBOX_BATCH_SIZE=500 txbox relay --db sqlite://app.db --broker nats://nats:4222 \
      --stream ORDERS --stream-subjects 'order.>'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRelay(cmd, &f) },
	}
	f.tables.multiDB = "repeat it to relay several databases from one process"
	f.tables.register(cmd, false)
	f.broker.register(cmd)
	fs := cmd.Flags()
	registerGroupFlags(fs, &f)
	fs.DurationVar(&f.pollInterval, "poll-interval", relay.DefaultPollInterval, "wait of an idle relay before polling again, 10ms to 1h (env "+EnvPollInterval+")")
	fs.IntVar(&f.batchSize, "batch-size", relay.DefaultBatchSize, "most rows claimed and published per round, 1 to 10000 (env "+EnvBatchSize+")")
	fs.DurationVar(&f.retention, "retention", relay.DefaultRetention, "how long delivered rows are kept before cleanup deletes them (cleanup runs every hour, or every --retention when shorter); 0 deletes each row as its delivery is recorded (env "+EnvRetention+")")
	fs.IntVar(&f.maxAttempts, "max-attempts", relay.DefaultMaxAttempts, "broker rejections before a message is parked as dead; outages do not count; 1 to 1000 (env "+EnvMaxAttempts+")")
	fs.DurationVar(&f.publishTimeout, "publish-timeout", relay.DefaultPublishTimeout, "bound on the wait for the broker's acks of one batch, 100ms to 1h; a claim holds its rows for --publish-timeout + 5s once its relay is gone (env "+EnvPublishTimeout+")")
	fs.StringSliceVar(&f.claimTables, "claim-check-table", nil, "claim check tables (in --schema) whose payloads cleanup deletes once both sides are done with them (repeat or comma-separate; docs/guide/claim-check.md)")
	fs.DurationVar(&f.claimRetention, "claim-check-retention", claimcheck.DefaultRetention, "with --claim-check-table: how long a payload is kept once its message was delivered, at least 1s")
	fs.BoolVar(&f.cdc, "cdc", false, "PostgreSQL: read the outbox table's inserts from the write-ahead log through a logical replication slot (txbox slot create) instead of claiming rows; one relay reads, others wait as standbys (docs/guide/cdc.md)")
	f.slot.register(fs)
	f.cdcOpts.register(fs)
	fs.BoolVar(&f.noNotify, "no-notify", false, "PostgreSQL only: poll only, without LISTEN/NOTIFY wake-ups (e.g. behind PgBouncer in transaction mode)")
	fs.DurationVar(&f.statsInterval, "stats-interval", DefaultStatsInterval, "how often to print a stats line to stdout, at least 100ms; 0 turns it off")
	fs.BoolVar(&f.migrate, "migrate", false, "apply pending migrations (as migrate up) before relaying")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines instead of text")
	fs.StringVar(&f.http, "http", "", "serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9090 (loopback only unless --http-public)")
	fs.BoolVar(&f.httpPublic, "http-public", false, "allow --http on an address other than loopback")
	fs.BoolVar(&f.ui, "ui", false, "also serve the web dashboard (as txbox ui) under /ui/ of --http")
	fs.StringSliceVar(&f.inboxTables, "inbox-table", nil, "with --ui: inbox tables (in --schema) whose receipts per source the dashboard shows, in every store (repeat or comma-separate)")
	fs.StringVar(&f.uiToken, "ui-token", "", "token the dashboard under /ui/ requires (basic-auth password or Authorization: Bearer); required when --http is not loopback, then at least 16 bytes (env "+EnvUIToken+")")
	fs.StringSliceVar(&f.allowed, "allowed-host", nil, "with --http on loopback: host name (optionally :port) besides loopback that a request may name in its Host header, e.g. the name a proxy forwards; others are refused (DNS rebinding protection; repeat or comma-separate)")
	return cmd
}

// Bounds of the relay's settings, as docs/reference/cli.md lists them: below the
// lower bounds a relay spins a core (polls, cleanups or stats queries without
// pause), above the upper ones it holds more than a database gives.
var (
	pollIntervalSetting   = setting[time.Duration]{flag: "poll-interval", env: EnvPollInterval, min: 10 * time.Millisecond, max: time.Hour}
	batchSizeSetting      = setting[int]{flag: "batch-size", env: EnvBatchSize, min: 1, max: 10000}
	retentionSetting      = setting[time.Duration]{flag: "retention", env: EnvRetention, min: time.Second, zero: true}
	maxAttemptsSetting    = setting[int]{flag: "max-attempts", env: EnvMaxAttempts, min: 1, max: 1000}
	publishTimeoutSetting = setting[time.Duration]{flag: "publish-timeout", env: EnvPublishTimeout, min: 100 * time.Millisecond, max: time.Hour}
	statsIntervalSetting  = setting[time.Duration]{flag: "stats-interval", min: 100 * time.Millisecond, zero: true}
)

// relayConfig builds the relay's config from the flags the user set, else
// the TXBOX_* environment (a variable a flag overrides is not read).
func relayConfig(cmd *cobra.Command, f *relayFlags) (relay.Config, error) {
	var cfg relay.Config
	fs := cmd.Flags()
	retention := time.Duration(-1) // unset
	for _, err := range []error{
		pollIntervalSetting.resolve(fs, f.pollInterval, &cfg.PollInterval),
		batchSizeSetting.resolve(fs, f.batchSize, &cfg.BatchSize),
		retentionSetting.resolve(fs, f.retention, &retention),
		maxAttemptsSetting.resolve(fs, f.maxAttempts, &cfg.MaxAttempts),
		publishTimeoutSetting.resolve(fs, f.publishTimeout, &cfg.PublishTimeout),
		statsIntervalSetting.resolve(fs, f.statsInterval, &f.statsInterval),
	} {
		if err != nil {
			return cfg, err
		}
	}
	if retention == 0 {
		cfg.Retention = relay.DeletePublished
	} else if retention > 0 {
		cfg.Retention = retention
	}
	cfg.Schema, cfg.Table = f.tables.schema, f.tables.table
	cfg.DisableNotify = f.noNotify
	if len(f.claimTables) > 0 && f.claimRetention < time.Second {
		return cfg, fmt.Errorf("%w: --claim-check-retention %v: want 1s or more", txbox.ErrInvalidConfig, f.claimRetention)
	}
	return cfg, nil
}

// uiTables are the tables the dashboard under /ui/ shows beside the
// outbox table: --inbox-table and the claim check tables the relay sweeps.
func (f *relayFlags) uiTables() uiTables {
	return uiTables{inbox: f.inboxTables, claims: f.claimTables, claimRetention: f.claimRetention}
}

func newLogger(w io.Writer, level string, json bool) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: escapeAttr}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func runRelay(cmd *cobra.Command, f *relayFlags) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	log, err := newLogger(cmd.ErrOrStderr(), f.logLevel, f.logJSON)
	if err != nil {
		return err
	}
	cfg, err := relayConfig(cmd, f)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if f.cdc {
		return runCDC(cmd, f, log, cfg)
	}
	warnCDCOnly(cmd.Flags(), log)
	if len(f.tables.moreDBs) > 0 || f.storesFile != "" {
		return runRelayGroup(cmd, f, log, cfg)
	}
	if f.ui {
		if f.http == "" {
			return fmt.Errorf("%w: --ui needs --http", txbox.ErrInvalidConfig)
		}
		if err := checkUIListen("--http", f.http, uiToken(f.uiToken)); err != nil {
			return err
		}
	}
	if f.served, err = serveRelayHTTP(ctx, log, f.http, f.httpPublic, f.ui, nil, f.allowed); err != nil {
		return err
	}
	defer f.served.close()
	cfg.Observer = f.served.observer()
	target, err := f.tables.target()
	if err != nil {
		return err
	}
	if _, err := (txbox.Config{Schema: cfg.Schema, Table: cfg.Table}).TableName(target.dialect); err != nil {
		return err
	}
	if f.noNotify && target.dialect != txboxdriver.Postgres {
		log.Warn("--no-notify has no effect: only a PostgreSQL relay is woken by LISTEN/NOTIFY; this one polls every --poll-interval", "db", target.String())
	}
	if err := f.broker.check(); err != nil {
		return err
	}
	f.broker.events = log

	// An unreachable database or broker is waited for; a wrong setting
	// or an unmigrated table is an error at once.
	db, err := untilReachable(ctx, log, "database "+target.String(), dbRetryable,
		func(ctx context.Context) (*database, error) { return openTarget(ctx, target, f.migrate) })
	if err != nil || db == nil {
		return err
	}
	defer db.Close()
	if f.ui {
		if err := f.served.mountUI(ctx, log, db, cfg.Schema, cfg.Table, uiToken(f.uiToken), f.uiTables(), f.broker.mode()); err != nil {
			return err
		}
	}
	tf := f.tables
	tf.log = log
	m, err := db.migrator(tf.migrateConfig())
	if err != nil {
		return err
	}
	if f.migrate {
		applied, err := m.Up(ctx)
		if err != nil {
			return fmt.Errorf("migrate up on %s: %w", db.target, err)
		}
		for _, mg := range applied {
			log.Info("applied migration", "target", mg.Target, "version", mg.Version, "name", mg.Name)
		}
	} else if pending, err := m.Pending(ctx); err == nil && len(pending) > 0 {
		log.Warn("migrations are pending or untracked: run `txbox migrate up` (or pass --migrate) unless another tool applied them",
			"db", db.target.String(), "pending", len(pending))
	}

	return reconnecting(ctx, log, out, f, func(br *broker) error {
		return relayWith(ctx, log, out, f, db, br, cfg)
	})
}

// reconnecting runs run with a broker connection, and again with a new one
// each time the connection closes for good (txbox.ErrPublisherClosed),
// after a pause that grows while connections keep closing soon after they
// were made. It returns run's other errors and nil once ctx ends. A Kafka
// producer with a transactional id is never connected again: a new one
// takes the id from whoever holds it, and the old one's failure may be
// another relay's takeover, named (txboxkafka.ErrFenced) or not (a commit
// racing the takeover can be refused as in an invalid state).
func reconnecting(ctx context.Context, log *slog.Logger, out io.Writer, f *relayFlags, run func(br *broker) error) error {
	var pause time.Duration
	for {
		br, err := untilReachable(ctx, log, "broker", isUnreachable,
			func(ctx context.Context) (*broker, error) { return openBroker(ctx, &f.broker, out) })
		if err != nil || br == nil {
			return err
		}
		began := time.Now()
		err = run(br)
		if br.natsPub != nil {
			// The server's max control line, if a closed connection taught
			// it, holds for the next connection.
			f.broker.maxControlLine = br.natsPub.MaxControlLine()
		}
		br.Close()
		if !errors.Is(err, txbox.ErrPublisherClosed) || ctx.Err() != nil {
			return err
		}
		if errors.Is(err, txboxkafka.ErrFenced) {
			// Another relay started with the same transactional id; a new
			// connection with it would fence that one in turn.
			return fmt.Errorf("another relay took over --kafka-transactional-id %s: %w", cell(f.broker.kafkaTxnID), err)
		}
		if f.broker.kafkaTxnID != "" {
			// The producer can never commit again, and the cluster's
			// answer does not say why: another relay may hold the id now.
			return fmt.Errorf("the Kafka producer of --kafka-transactional-id %s failed for good, maybe because another relay took the id over; not connecting again, which would take the id from that relay (restart this one if none runs with the id): %w",
				cell(f.broker.kafkaTxnID), err)
		}
		if time.Since(began) > time.Minute {
			pause = 0
		}
		pause = backoff.Next(pause, StartRetryFirst, StartRetryMax)
		log.Error("the broker connection is closed for good; connecting again", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			log.Info("stopping relay", "cause", context.Cause(ctx))
			return nil
		case <-time.After(pause):
		}
	}
}

// The wait of `txbox relay` between tries to reach its database or broker at
// start: StartRetryFirst, doubling, at most StartRetryMax.
const (
	StartRetryFirst = 100 * time.Millisecond
	StartRetryMax   = 5 * time.Second
)

// untilReachable calls open until it succeeds, fails with an error that
// retryable says no retry cures, or ctx ends; it logs each failed try and
// waits StartRetryFirst, doubling to StartRetryMax, between tries. When ctx
// ends first (the relay was asked to stop) it returns a nil value and a nil
// error.
func untilReachable[T any](ctx context.Context, log *slog.Logger, what string, retryable func(error) bool,
	open func(context.Context) (T, error)) (T, error) {
	var wait time.Duration
	for try := 1; ; try++ {
		v, err := open(ctx)
		if err == nil {
			if try > 1 {
				log.Info(what+" reached", "tries", try)
			}
			return v, nil
		}
		if ctx.Err() == nil && !retryable(err) {
			return v, err
		}
		wait = backoff.Next(wait, StartRetryFirst, StartRetryMax)
		if ctx.Err() == nil {
			log.Warn(what+" unreachable; trying again", "try", try, "retry_in", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			log.Info("stopping relay before it started", "cause", context.Cause(ctx), "waiting_for", what, "last_err", err)
			var zero T
			return zero, nil
		case <-time.After(wait):
		}
	}
}

// dbRetryable reports whether a failure to open or ping a database may go
// away by itself: PostgreSQL or MySQL down, restarting or unreachable; not
// what txboxpgx.IsPermanentConnectError or txboxsql.IsPermanentConnectError
// accept (bad credentials, a database that does not exist), nor a SQLite
// file that openTarget cannot open.
func dbRetryable(err error) bool {
	return !txboxpgx.IsPermanentConnectError(err) && !txboxsql.IsPermanentConnectError(err) &&
		!strings.HasPrefix(err.Error(), "open sqlite:")
}

// relayWith runs a relay on db and br until ctx ends (nil) or the relay
// stops by itself (its error, txbox.ErrPublisherClosed). An outbox table
// that is missing or not migrated is a *txbox.StartupError.
func relayWith(ctx context.Context, log *slog.Logger, out io.Writer, f *relayFlags, db *database, br *broker, cfg relay.Config) error {
	pub := br.pub
	r, err := db.relay(pub, cfg, f.claimTables, f.claimRetention)
	if err != nil {
		return err
	}
	cfg = r.Config()
	f.served.set(r)
	defer f.served.set(nil)
	if err := r.Start(ctx); err != nil {
		return err
	}
	log.Info("relay started", append([]any{"db", db.target.String(), "broker", br.desc}, append(publisherAttrs(pub),
		"schema", cmp.Or(cfg.Schema, "(the connection's default)"), "table", cfg.Table,
		"poll_interval", cfg.PollInterval, "batch_size", cfg.BatchSize, "retention", cfg.Retention, "delete_published", cfg.Retention == relay.DeletePublished,
		"max_attempts", cfg.MaxAttempts, "publish_timeout", cfg.PublishTimeout)...)...)

	var tick <-chan time.Time
	if f.statsInterval > 0 {
		t := time.NewTicker(f.statsInterval)
		defer t.Stop()
		tick = t.C
	}
	var last int64
	var closed error
	printStats := func(sctx context.Context) {
		st, err := r.Stats(sctx)
		if err != nil {
			log.Warn("relay stats", "err", err)
			return
		}
		fmt.Fprintln(out, statsLine(st, st.Published-last))
		last = st.Published
	}
loop:
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping relay", "cause", context.Cause(ctx))
			break loop
		case <-r.Stopped():
			break loop
		case <-br.closed: // never ready for the brokers other than NATS
			// An idle relay would notice only at its next publish.
			closed = fmt.Errorf("%w: the NATS connection is closed: %v", txbox.ErrPublisherClosed, br.nc.LastError())
			break loop
		case <-tick:
			printStats(ctx)
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.PublishTimeout+10*time.Second)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil {
		return fmt.Errorf("relay did not stop in time: %w", err)
	}
	if f.statsInterval > 0 {
		printStats(stopCtx)
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

// escapeAttr escapes the control characters of a log's strings and errors
// (rows' errors and keys come from the database), as cell does, and writes
// durations as Go duration text ("1.5s") in JSON logs too.
func escapeAttr(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value.Any().(type) {
	case string:
		a.Value = slog.StringValue(text(v))
	case error:
		a.Value = slog.StringValue(text(v.Error()))
	case time.Duration:
		a.Value = slog.StringValue(v.String()) // "1.5s", not 1500000000 in JSON
	}
	return a
}

// statsLine formats one progress line of the relay, in the words of
// docs/reference/glossary.md: this process's counters (published, rejected, went
// dead), then the table's outstanding (parked among them) and dead rows.
func statsLine(st relay.Stats, delta int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "relay: published %d (+%d), rejected %d, went dead %d; outstanding %d (parked %d", st.Published, delta, st.Rejected, st.Dead, st.Pending, st.Parked)
	if st.Pending > 0 {
		fmt.Fprintf(&b, ", oldest %s", st.OldestPendingAge.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "), dead %d; rounds %d (failed %d)", st.DeadRows, st.Rounds, st.FailedRounds)
	if st.Duplicates > 0 {
		fmt.Fprintf(&b, ", broker duplicates %d", st.Duplicates)
	}
	return b.String()
}
