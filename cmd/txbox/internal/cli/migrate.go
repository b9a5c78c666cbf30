package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
)

// tableFlags are the flags naming txbox's tables, shared by migrate and relay.
type tableFlags struct {
	db     string
	schema string
	table  string

	// relay and ui: --db may be repeated (relay_group.go), as multiDB, the
	// end of its usage, says; the second and later URLs are in moreDBs.
	multiDB string
	moreDBs []string

	// noTable: no --table (a command without an outbox table: inbox).
	noTable bool

	// migrate only
	inboxTables []string
	claimTables []string
	noOutbox    bool
	lockTimeout time.Duration // 0: the default
	lockRetries int
	lockFlags   bool // --lock-timeout and --lock-retries are registered

	log *slog.Logger // the migrations' warnings (nil: slog.Default())

	fs *pflag.FlagSet // to name --db or TXBOX_DB in errors
}

func (f *tableFlags) register(cmd *cobra.Command, persistent bool) {
	fs := cmd.Flags()
	if persistent {
		fs = cmd.PersistentFlags()
	}
	f.fs = fs
	dbUsage := "database URL: postgres://user:pass@host:5432/db (or postgresql://…), mysql://user:pass@host:3306/db, sqlite://path/to/file.db or sqlite:file.db (env " + EnvDB + ")"
	if f.multiDB != "" {
		f.db = envOr(EnvDB, DefaultDB)
		fs.Var(&repeatedDB{f: f}, "db", dbUsage+"; "+f.multiDB)
	} else {
		fs.StringVar(&f.db, "db", envOr(EnvDB, DefaultDB), dbUsage)
	}
	fs.StringVar(&f.schema, "schema", envOr(EnvSchema, ""),
		"PostgreSQL schema of txbox's tables, created by migrate up if missing; empty means the connection's search_path (env "+EnvSchema+")")
	if !f.noTable {
		fs.StringVar(&f.table, "table", envOr(EnvTable, txboxmigrate.DefaultOutboxTable),
			"outbox table name (env "+EnvTable+")")
	}
}

func (f *tableFlags) migrateConfig() txboxmigrate.Config {
	c := txboxmigrate.Config{Schema: f.schema, OutboxTable: f.table, InboxTables: f.inboxTables, ClaimCheckTables: f.claimTables, NoOutbox: f.noOutbox,
		LockTimeout: f.lockTimeout, LockRetries: f.lockRetries, Logger: f.log}
	if f.lockFlags && f.lockRetries == 0 {
		c.LockRetries = -1 // --lock-retries 0: none (0 is the default in Config)
	}
	return c
}

// registerLockFlags adds --lock-timeout and --lock-retries to migrate up
// and down, whose warnings go to cmd's standard error.
// tablesDesc names the schema and the tables the flags choose, for a line
// such as migrate up's "… is up to date (schema app: outbox txbox_outbox,
// inbox orders_inbox)".
func (f *tableFlags) tablesDesc() string {
	var tables []string
	if !f.noOutbox {
		tables = append(tables, "outbox "+cell(f.table))
	}
	for _, t := range f.inboxTables {
		tables = append(tables, "inbox "+cell(t))
	}
	for _, t := range f.claimTables {
		tables = append(tables, "claim check "+cell(t))
	}
	schema := "the connection's search_path"
	if f.schema != "" {
		schema = "schema " + cell(f.schema)
	}
	return schema + ": " + strings.Join(tables, ", ")
}

func (f *tableFlags) registerLockFlags(cmd *cobra.Command) {
	f.lockFlags = true
	cmd.Flags().DurationVar(&f.lockTimeout, "lock-timeout", txboxmigrate.DefaultLockTimeout,
		"how long a migration waits for its table while another session's transaction uses it (writers of the table wait behind it); then it rolls back and tries again; -1s: as long as the database says")
	cmd.Flags().IntVar(&f.lockRetries, "lock-retries", txboxmigrate.DefaultLockRetries,
		"how many more times a migration that timed out tries (1 s apart, doubling, at most 15 s), before the command fails naming the sessions that hold the table")
}

// checkLockFlags refuses a zero --lock-timeout and a negative
// --lock-retries, and sends the warnings to cmd's standard error.
func (f *tableFlags) checkLockFlags(cmd *cobra.Command) error {
	if f.lockTimeout == 0 {
		return fmt.Errorf("%w: --lock-timeout 0: want a duration (e.g. 2s), or -1s to wait as long as the database says", txbox.ErrInvalidConfig)
	}
	if f.lockRetries < 0 {
		return fmt.Errorf("%w: --lock-retries %d: want 0 or more", txbox.ErrInvalidConfig, f.lockRetries)
	}
	f.log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	return nil
}

// target parses --db (or TXBOX_DB), and refuses --schema (or
// TXBOX_SCHEMA) off PostgreSQL.
func (f *tableFlags) target() (dbTarget, error) {
	t, err := parseDBFrom(sourceOf(f.fs, "db", EnvDB), f.db)
	if err == nil && f.schema != "" && t.dialect != txboxdriver.Postgres {
		hint := ""
		if t.dialect == txboxdriver.MySQL {
			hint = " (on MySQL, name the database in the --db URL)"
		}
		err = fmt.Errorf("%w: %s %q: a schema is only supported on PostgreSQL, not %s%s",
			txbox.ErrInvalidConfig, sourceOf(f.fs, "schema", EnvSchema), f.schema, t.dialect, hint)
	}
	return t, err
}

// open opens and pings --db, which must exist: only migrate up creates a
// SQLite file.
func (f *tableFlags) open(ctx context.Context) (*database, error) {
	t, err := f.target()
	if err != nil {
		return nil, err
	}
	return openTarget(ctx, t, mustExist)
}

// openMigrator opens --db and a Migrator for the configured tables; the
// caller closes the database. create says whether a missing SQLite file
// is created (migrate up) or an error (migrate status).
func (f *tableFlags) openMigrator(ctx context.Context, create bool) (*database, *txboxmigrate.Migrator, error) {
	t, err := f.target()
	if err != nil {
		return nil, nil, err
	}
	// Bad table names first: they are wrong whatever the database holds.
	if _, err := txboxmigrate.Plan(t.dialect, f.migrateConfig()); err != nil {
		return nil, nil, err
	}
	db, err := openTarget(ctx, t, create)
	if err != nil {
		return nil, nil, err
	}
	m, err := db.migrator(f.migrateConfig())
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, m, nil
}

func newMigrateCmd() *cobra.Command {
	var f tableFlags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create, upgrade and revert txbox's tables (up, down, status, sql)",
		Long: `Create, upgrade and revert txbox's tables with numbered, embedded migrations.

  txbox migrate up      apply the pending migrations
  txbox migrate down    revert the migrations above a version
  txbox migrate status  list every migration and when it was applied
  txbox migrate sql     print the SQL, for goose, atlas or another tool

Applied migrations are recorded in the table txbox_migrations (in --schema on
PostgreSQL). Nothing in txbox ever creates a table implicitly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.register(cmd, true)
	cmd.PersistentFlags().StringSliceVar(&f.inboxTables, "inbox-table", nil,
		"inbox table to migrate too (repeat or comma-separate for several)")
	cmd.PersistentFlags().StringSliceVar(&f.claimTables, "claim-check-table", nil,
		"claim check table (large payloads, package claimcheck; usually txbox_claim_check) to migrate too (repeat or comma-separate for several)")
	cmd.PersistentFlags().BoolVar(&f.noOutbox, "no-outbox", false,
		"leave out the outbox table (a consumer-only service)")
	cmd.AddCommand(newMigrateUpCmd(&f), newMigrateDownCmd(&f), newMigrateStatusCmd(&f), newMigrateSQLCmd(&f))
	return cmd
}

func newMigrateUpCmd(f *tableFlags) *cobra.Command {
	var to int
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Apply the pending migrations",
		Long: `Apply every pending migration to the database given by --db, each in its own
transaction together with its row in txbox_migrations. Running it again is a
no-op; concurrent runs on PostgreSQL are safe. --to VERSION applies those up to
that version only (migrate status lists them).`,
		Example: `  txbox migrate up
  txbox migrate up --db postgres://app@localhost:5432/app --schema txbox
  txbox migrate up --inbox-table orders_inbox
  txbox migrate up --to 6`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("to") {
				to = math.MaxInt
			} else if to < 1 {
				return fmt.Errorf("%w: --to %d: want 1 or more", txbox.ErrInvalidConfig, to)
			}
			if err := f.checkLockFlags(cmd); err != nil {
				return err
			}
			ctx := cmd.Context()
			db, m, err := f.openMigrator(ctx, createFile)
			if err != nil {
				return err
			}
			defer db.Close()
			applied, err := m.UpTo(ctx, to)
			out := cmd.OutOrStdout()
			for _, mg := range applied {
				fmt.Fprintf(out, "applied %s %03d %s\n", mg.Target, mg.Version, mg.Name)
			}
			if err != nil {
				return fmt.Errorf("migrate up on %s: %w", db.target, err)
			}
			if err := verify(ctx, m); err != nil {
				return fmt.Errorf("migrate up on %s: every migration is recorded, but %w", db.target, err)
			}
			switch {
			case len(applied) > 0:
			case cmd.Flags().Changed("to"):
				fmt.Fprintf(out, "%s: nothing pending up to version %d (%s)\n", db.target, to, f.tablesDesc())
			default:
				fmt.Fprintf(out, "%s is up to date (%s)\n", db.target, f.tablesDesc())
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "apply the migrations up to this version only (default: all)")
	f.registerLockFlags(cmd)
	return cmd
}

func newMigrateDownCmd(f *tableFlags) *cobra.Command {
	var to int
	var force bool
	cmd := &cobra.Command{
		Use:   "down --to VERSION",
		Short: "Revert the migrations above a version",
		Long: `Revert, newest first, every applied migration numbered above --to, for each
table the flags name (the outbox table, and --inbox-table ones), each in its
own transaction with the removal of its row in txbox_migrations: what going
back to an earlier txbox release needs. --to 0 drops the tables.

Stop the relays and consumers of these tables first: a release that needs a
reverted migration refuses to start, and one already running fails its
rounds. It refuses, before changing anything, to drop an outbox table that
holds undelivered messages (pending or dead) or an inbox table that holds
receipts, unless --force. Rows an up migration parked dead stay dead.
` + "`txbox migrate sql --down --to VERSION`" + ` prints the same SQL instead.`,
		Example: `  txbox migrate down --to 6
  txbox migrate down --to 0 --inbox-table orders_inbox --force`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("to") {
				return fmt.Errorf("%w: give --to VERSION, the version to go back to (0 drops the tables; migrate status lists the versions)", txbox.ErrInvalidConfig)
			}
			if to < 0 {
				return fmt.Errorf("%w: --to %d: want 0 or more", txbox.ErrInvalidConfig, to)
			}
			if err := f.checkLockFlags(cmd); err != nil {
				return err
			}
			ctx := cmd.Context()
			db, m, err := f.openMigrator(ctx, mustExist)
			if err != nil {
				return err
			}
			defer db.Close()
			reverted, err := m.Down(ctx, txboxmigrate.DownOptions{To: to, Force: force})
			out := cmd.OutOrStdout()
			for _, mg := range reverted {
				fmt.Fprintf(out, "reverted %s %03d %s\n", mg.Target, mg.Version, mg.Name)
			}
			if errors.Is(err, txboxmigrate.ErrDataLoss) {
				return fmt.Errorf("migrate down on %s: %w; --force drops them anyway", db.target, err)
			}
			if err != nil {
				return fmt.Errorf("migrate down on %s: %w", db.target, err)
			}
			if len(reverted) == 0 {
				fmt.Fprintf(out, "%s: nothing applied above version %d\n", db.target, to)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "the version to go back to; 0 drops the tables (required)")
	cmd.Flags().BoolVar(&force, "force", false, "drop an outbox table with undelivered messages, or an inbox table with receipts")
	f.registerLockFlags(cmd)
	return cmd
}

// statusJSON is one row of migrate status --json.
type statusJSON struct {
	Target    string     `json:"target"`
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	AppliedAt *time.Time `json:"applied_at"` // null: pending
	// Newer: applied by a newer txbox release, unknown to this one.
	Newer bool `json:"newer,omitempty"`
}

func newMigrateStatusCmd(f *tableFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List every migration and when it was applied",
		Long: `Print a table of every migration txbox has for the configured tables: its
target (kind:table), version, name, and when it was applied ("pending" if not
yet); then the migrations of those tables that a newer txbox release applied,
marked "(by a newer txbox release)": only that release can revert them.

Then it inspects each table whose migrations are all recorded, as the relay
and the consumer do at start-up: the table is there and readable, has every
column its migrations create, each of the same kind of type (integer, text,
bytes, json, time), and an outbox table takes the relay's writes (a row is
inserted, updated as the relay marks it failed and published, and rolled
back: a trigger added by hand that refuses them shows here). It names what is
wrong and what to run, and exits 1. It changes nothing in the database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			db, m, err := f.openMigrator(ctx, mustExist)
			if err != nil {
				return err
			}
			defer db.Close()
			st, err := m.Status(ctx)
			if err != nil {
				return fmt.Errorf("migrate status on %s: %w", db.target, err)
			}
			if asJSON {
				js := make([]statusJSON, len(st))
				for i, s := range st {
					js[i] = statusJSON{Target: s.Target, Version: s.Version, Name: s.Name, AppliedAt: timeOrNil(s.AppliedAt), Newer: s.Newer}
				}
				if err := writeJSON(cmd.OutOrStdout(), js); err != nil {
					return err
				}
				if err := verify(ctx, m); err != nil {
					return fmt.Errorf("migrate status on %s: %w", db.target, err)
				}
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TARGET\tVERSION\tNAME\tAPPLIED AT")
			for _, s := range st {
				at := "pending"
				if !s.AppliedAt.IsZero() {
					at = s.AppliedAt.UTC().Format(time.RFC3339)
				}
				if s.Newer {
					at += " (by a newer txbox release)"
				}
				fmt.Fprintf(tw, "%s\t%03d\t%s\t%s\n", cell(s.Target), s.Version, cell(s.Name), at)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if err := verify(ctx, m); err != nil {
				return fmt.Errorf("migrate status on %s: %w", db.target, err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (applied_at null: pending; newer true: applied by a newer txbox release)")
	return cmd
}

// verify returns an error naming what is wrong with the tables whose
// migrations are all recorded (txboxmigrate.Migrator.Verify), or nil.
func verify(ctx context.Context, m *txboxmigrate.Migrator) error {
	problems, err := m.Verify(ctx)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d table(s) do not match their migrations:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return nil
}

func newMigrateSQLCmd(f *tableFlags) *cobra.Command {
	var dialect string
	var down, goose, noBegin bool
	var to, from int
	cmd := &cobra.Command{
		Use:   "sql",
		Short: "Print the migrations' SQL, for goose, atlas or another tool",
		Long: `Print every migration as one SQL script, with a comment naming each, for teams
that apply migrations with their own tool (goose, atlas, Flyway, psql -f). It
connects to no database: the dialect comes from --dialect, or from the scheme
of --db. Like migrate up, the script creates --schema and txbox_migrations if
missing and records each migration there (idempotently), so that the relay,
the consumer and migrate status find the tables migrated, and migrate up
afterwards has nothing to do. It runs between BEGIN and COMMIT (whole or not at
all under psql -f or sqlite3); --no-begin leaves them out, for a tool that runs
it in a transaction of its own (Flyway, atlas, psql -1). MySQL commits each DDL
statement on its own: a MySQL script that stops part way leaves the migrations
before the failing one applied and recorded; migrate up finishes the rest.

--to VERSION prints the migrations up to that version only, --from VERSION
those above it (a later release's new migrations, for a new file of your
tool's). --down prints the
down migrations instead, newest first: those above --to (default 0, all of
them), what ` + "`txbox migrate down --to VERSION`" + ` runs, each removing its row in
txbox_migrations. --goose prints one goose migration file: the migrations
under -- +goose Up and their down migrations under -- +goose Down, each
statement between StatementBegin and StatementEnd.`,
		Example: `  txbox migrate sql --dialect postgres --schema txbox > 001_txbox.sql
  txbox migrate sql --db sqlite://app.db
  txbox migrate sql --dialect postgres --down --to 6
  txbox migrate sql --dialect postgres --goose > migrations/20260101000000_txbox.sql
  txbox migrate sql --dialect postgres --no-begin > flyway/sql/V1__txbox.sql`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var d txboxdriver.Dialect
			switch dialect {
			case "":
				t, err := f.target()
				if err != nil {
					return fmt.Errorf("cannot infer the dialect (give --dialect postgres|sqlite|mysql): %w", err)
				}
				d = t.dialect
			case "postgres", "postgresql":
				d = txboxdriver.Postgres
			case "sqlite":
				d = txboxdriver.SQLite
			case "mysql", "mariadb":
				d = txboxdriver.MySQL
			default:
				return fmt.Errorf("--dialect %q: want postgres, sqlite or mysql", dialect)
			}
			if to < 0 {
				return fmt.Errorf("%w: --to %d: want 0 or more", txbox.ErrInvalidConfig, to)
			}
			if err := f.checkLockFlags(cmd); err != nil {
				return err
			}
			ms, err := txboxmigrate.Plan(d, f.migrateConfig())
			if err != nil {
				return err
			}
			if goose && down {
				return fmt.Errorf("%w: --goose prints the down migrations already (under -- +goose Down): give --goose or --down, not both", txbox.ErrInvalidConfig)
			}
			if goose && noBegin {
				return fmt.Errorf("%w: --no-begin: goose runs each section in a transaction of its own already; give --goose alone", txbox.ErrInvalidConfig)
			}
			if from < 0 || (from > 0 && down) {
				return fmt.Errorf("%w: --from %d: want 0 or more, and not with --down (whose --to says where it stops)", txbox.ErrInvalidConfig, from)
			}
			ms = slices.DeleteFunc(ms, func(m txboxmigrate.Migration) bool { return m.Version <= from })
			if down {
				ms = slices.DeleteFunc(ms, func(m txboxmigrate.Migration) bool { return m.Version <= to })
			} else if cmd.Flags().Changed("to") {
				ms = slices.DeleteFunc(ms, func(m txboxmigrate.Migration) bool { return m.Version > to })
			}
			var script string
			switch opts := (txboxmigrate.ScriptOptions{NoBegin: noBegin}); {
			case goose:
				script, err = txboxmigrate.GooseScript(d, f.schema, ms)
			case down:
				script, err = txboxmigrate.DownScript(d, f.schema, ms, opts)
			default:
				script, err = txboxmigrate.UpScript(d, f.schema, ms, opts)
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), script)
			return err
		},
	}
	cmd.Flags().StringVar(&dialect, "dialect", "", "SQL dialect: postgres, sqlite or mysql (default: from the scheme of --db)")
	cmd.Flags().BoolVar(&down, "down", false, "print the down migrations, newest first")
	cmd.Flags().BoolVar(&goose, "goose", false, "print one goose migration file: the migrations under -- +goose Up, their down migrations under -- +goose Down")
	cmd.Flags().BoolVar(&noBegin, "no-begin", false, "leave out BEGIN and COMMIT, for a tool that runs the script in a transaction of its own (Flyway, atlas, psql -1)")
	cmd.Flags().IntVar(&to, "to", 0, "up to this version only; with --down, the version to go back to (default: every migration)")
	cmd.Flags().IntVar(&from, "from", 0, "only the migrations above this version: those a later txbox release added, for a new file of your tool's")
	return cmd
}
