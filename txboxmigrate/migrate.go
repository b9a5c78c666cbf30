// Package txboxmigrate creates, upgrades and reverts txbox's tables: numbered
// migrations, embedded per dialect, applied from Go, from `txbox migrate
// up`, or printed with SQL for teams that run goose, atlas or another
// migration tool. Every migration has a down migration (Migrator.Down,
// `txbox migrate down`), for going back to an earlier txbox release.
//
// Applied versions are recorded in the table txbox_migrations (in the
// configured schema on PostgreSQL), one row per (target, version), where a
// target names a table such as "outbox:txbox_outbox". Migrations never run
// implicitly: nothing in txbox creates a table inside a caller's transaction.
package txboxmigrate

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/internal/migratesql"
	"github.com/txbox/txbox/internal/outboxtable"
	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/internal/sqltext"
	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql
var files embed.FS

// Defaults.
const (
	DefaultOutboxTable = "txbox_outbox"
	DefaultLockTimeout = 2 * time.Second
	DefaultLockRetries = 10
	trackingTable      = "txbox_migrations"
)

// ErrLockTimeout is returned (wrapped) when a migration gave up waiting for
// a lock on its table LockRetries + 1 times: another session's transaction
// kept using the table. The error names those sessions on PostgreSQL.
var ErrLockTimeout = errors.New("txbox/migrate: the table stayed in use by other sessions")

// Kinds of table txbox migrates.
const (
	KindOutbox = "outbox"
	KindInbox  = "inbox"
	// KindClaimCheck is a claim check table (package claimcheck).
	KindClaimCheck = "claimcheck"
)

// Config says which tables to migrate.
type Config struct {
	// Schema is the PostgreSQL schema of every table, created if missing.
	// Default: "" (the connection's search_path, usually public). Must be
	// empty on other dialects.
	Schema string
	// OutboxTable is the outbox table's name. Default: DefaultOutboxTable.
	OutboxTable string
	// NoOutbox skips the outbox table (for a consumer-only service).
	NoOutbox bool
	// InboxTables lists inbox tables to create. Default: none.
	InboxTables []string
	// ClaimCheckTables lists claim check tables to create (package
	// claimcheck; default name claimcheck.DefaultTable,
	// "txbox_claim_check"). Default: none.
	ClaimCheckTables []string

	// LockTimeout bounds how long a migration waits for a lock on its
	// table while another session's transaction uses it (PostgreSQL's
	// lock_timeout; MySQL's lock_wait_timeout, in whole seconds; SQLite
	// waits as its connection's busy timeout says). While a migration
	// waits, every later writer of the table (your application's Add)
	// waits behind it: a long wait would stall them all. After a timeout
	// the migration rolls back, waits (1 s, doubling, at most 15 s) and
	// tries again. Default: DefaultLockTimeout. Negative: wait as long as
	// the database's own setting says.
	LockTimeout time.Duration
	// LockRetries is how many more times a migration that timed out
	// tries, before Up or Down returns ErrLockTimeout. Default:
	// DefaultLockRetries. Negative: none.
	LockRetries int
	// Logger receives a warning at each lock timeout, and at each retry of
	// Startup. Default: slog.Default().
	Logger *slog.Logger
}

// Migration is one numbered step for one table.
type Migration struct {
	Target  string // "outbox:txbox_outbox"
	Version int
	Name    string // from the file name: "create_outbox"
	SQL     string // rendered for the configured table
	// Down is the SQL that reverts it (Migrator.Down), from the file
	// NNN_name.down.sql beside it.
	Down string
}

// Status is a migration and when it was applied (zero if not yet).
type Status struct {
	Migration
	AppliedAt time.Time
	// Newer says a newer txbox release applied it: this one has no such
	// migration (no SQL, no Down). Only that release can revert it.
	Newer bool
}

// Migrator applies migrations through a caller-owned pool.
type Migrator struct {
	sql         migratesql.Dialect // the tracking table's SQL
	dialect     txboxdriver.Dialect
	pool        txboxdriver.Pool
	schema      string
	migrations  []Migration
	lockTimeout time.Duration // <0: none
	lockRetries int
	log         *slog.Logger
	// transient: the database failed, not the statement
	// (txboxdriver.IsTransientFor), or the statement's connection closed
	// between two messages (a bare io.EOF: the statements are the
	// Migrator's own, so the EOF is the database's; see lost).
	transient func(error) bool
	// missingTable: a table named in the statement does not exist (the
	// driver's MissingTableClassifier, or the SQLSTATE).
	missingTable func(error) bool
}

// New returns a Migrator for drv's database. It validates every table name.
// When drv is a *txbox.Outbox, its table is the outbox table (cfg's Schema
// and OutboxTable may be left empty).
func New[TTx any](drv txboxdriver.Driver[TTx], cfg Config) (*Migrator, error) {
	if !cfg.NoOutbox {
		var err error
		if cfg.Schema, cfg.OutboxTable, err = outboxtable.Of(drv, cfg.Schema, cfg.OutboxTable); err != nil {
			return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
		}
	}
	migrations, err := Plan(drv.Dialect(), cfg)
	if err != nil {
		return nil, err
	}
	sql, err := migratesql.New(drv.Dialect(), cfg.Schema, trackingTable)
	if err != nil {
		return nil, err
	}
	m := &Migrator{sql: sql, dialect: drv.Dialect(), pool: drv.Pool(), schema: cfg.Schema, migrations: migrations,
		lockTimeout: cfg.LockTimeout, lockRetries: max(cfg.LockRetries, 0), log: cfg.Logger,
		transient:    func(err error) bool { return txboxdriver.IsTransientFor(drv, err) || errors.Is(err, io.EOF) },
		missingTable: func(err error) bool { return txboxdriver.IsMissingTableFor(drv, err) }}
	if m.lockTimeout == 0 {
		m.lockTimeout = DefaultLockTimeout
	}
	if cfg.LockRetries == 0 {
		m.lockRetries = DefaultLockRetries
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	return m, nil
}

// Plan renders every migration cfg asks for, in the order Up applies them.
func Plan(d txboxdriver.Dialect, cfg Config) ([]Migration, error) {
	if cfg.Schema != "" {
		if d != txboxdriver.Postgres {
			return nil, fmt.Errorf("txbox: a schema is only supported on PostgreSQL, not %s", d)
		}
		if err := sqlname.Validate("schema", cfg.Schema); err != nil {
			return nil, fmt.Errorf("txbox: %w", err)
		}
	}
	type target struct{ kind, table string }
	var targets []target
	if !cfg.NoOutbox {
		t := cfg.OutboxTable
		if t == "" {
			t = DefaultOutboxTable
		}
		targets = append(targets, target{KindOutbox, t})
	}
	for _, t := range cfg.InboxTables {
		targets = append(targets, target{KindInbox, t})
	}
	for _, t := range cfg.ClaimCheckTables {
		targets = append(targets, target{KindClaimCheck, t})
	}
	var out []Migration
	seen := map[string]bool{}
	for _, t := range targets {
		if err := sqlname.Validate(t.kind+" table", t.table); err != nil {
			return nil, fmt.Errorf("txbox: %w", err)
		}
		if seen[t.table] {
			return nil, fmt.Errorf("txbox: table %q is configured twice", t.table)
		}
		seen[t.table] = true
		ms, err := render(d, cfg.Schema, t.kind, t.table)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

func render(d txboxdriver.Dialect, schema, kind, table string) ([]Migration, error) {
	dir := path.Join("sql", string(d), kind)
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, fmt.Errorf("txbox: no %s migrations for dialect %q", kind, d)
	}
	names := sqltext.Names(d, schema, table)
	var out []Migration
	downs := map[int]string{}
	for _, e := range entries {
		base, down := strings.CutSuffix(strings.TrimSuffix(e.Name(), ".sql"), ".down")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("txbox: bad migration file name %s", e.Name())
		}
		text, err := files.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sql, err := sqltext.Render(path.Join(dir, e.Name()), string(text), names)
		if err != nil {
			return nil, err
		}
		if down {
			downs[v] = sql
			continue
		}
		out = append(out, Migration{Target: kind + ":" + table, Version: v, Name: name, SQL: sql})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		down, ok := downs[out[i].Version]
		if !ok {
			return nil, fmt.Errorf("txbox: migration %s/%03d_%s has no down migration", dir, out[i].Version, out[i].Name)
		}
		if out[i].Down, err = reapply(down, out[:i]); err != nil {
			return nil, fmt.Errorf("txbox: down migration %s/%03d_%s: %w", dir, out[i].Version, out[i].Name, err)
		}
	}
	return out, nil
}

// reapply replaces each line "-- txbox:up N" of a down migration with the
// SQL of the earlier migration N (in earlier): a down that restores what N
// created, such as a function's earlier body, without a copy of it.
func reapply(down string, earlier []Migration) (string, error) {
	lines := strings.Split(down, "\n")
	for i, line := range lines {
		num, ok := strings.CutPrefix(strings.TrimSpace(line), "-- txbox:up ")
		if !ok {
			continue
		}
		v, err := strconv.Atoi(num)
		j := slices.IndexFunc(earlier, func(m Migration) bool { return m.Version == v })
		if err != nil || j < 0 {
			return "", fmt.Errorf("%q names no earlier migration", strings.TrimSpace(line))
		}
		lines[i] = earlier[j].SQL
	}
	return strings.Join(lines, "\n"), nil
}

// ensureTracking creates the schema and the tracking table if missing, in
// one transaction under the dialect's setup lock, so that concurrent Ups on
// a fresh database do not race to create them.
func (m *Migrator) ensureTracking(ctx context.Context) error {
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if q := m.sql.SetupLock(); q != "" {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("txbox: lock for setup: %w", err)
		}
	}
	if q := m.sql.CreateSchema(); m.schema != "" && q != "" {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("txbox: create schema %s: %w", m.schema, err)
		}
	}
	if _, err := tx.Exec(ctx, m.sql.CreateTracking()); err != nil {
		return fmt.Errorf("txbox: create %s: %w", trackingTable, err)
	}
	return tx.Commit(ctx)
}

// record is a row of the tracking table.
type record struct {
	target  string
	version int
	name    string
	at      time.Time
}

func (m *Migrator) applied(ctx context.Context, ex txboxdriver.Executor) (map[string]record, error) {
	rows, err := ex.Query(ctx, m.sql.Applied())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]record{}
	for rows.Next() {
		var target, name string
		var version int
		var at any
		if err := rows.Scan(&target, &version, &at, &name); err != nil {
			return nil, err
		}
		out[key(target, version)] = record{target, version, name, parseTime(at)}
	}
	return out, rows.Err()
}

func key(target string, version int) string { return target + "#" + strconv.Itoa(version) }

func parseTime(v any) time.Time {
	switch t := v.(type) {
	case time.Time:
		return t
	case string:
		p, _ := time.Parse(time.RFC3339Nano, t)
		return p
	case []byte:
		p, _ := time.Parse(time.RFC3339Nano, string(t))
		return p
	}
	return time.Time{}
}

// Status lists every configured migration and when it was applied, then
// the migrations of the configured tables that a newer txbox release
// applied (Status.Newer). It changes nothing: without the tracking table
// every migration is pending.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	done, err := m.applied(ctx, m.pool)
	if err != nil {
		if !m.missingTable(err) {
			return nil, fmt.Errorf("txbox: read %s: %w", trackingTable, err)
		}
		done = map[string]record{}
	}
	out := make([]Status, len(m.migrations))
	for i, mg := range m.migrations {
		out[i] = Status{Migration: mg, AppliedAt: done[key(mg.Target, mg.Version)].at}
	}
	return append(out, m.newer(done)...), nil
}

// newer returns the applied migrations of the configured targets that this
// release does not have, by target (in configured order) and version.
func (m *Migrator) newer(done map[string]record) []Status {
	known := map[string]bool{}
	var targets []string
	for _, mg := range m.migrations {
		if !slices.Contains(targets, mg.Target) {
			targets = append(targets, mg.Target)
		}
		known[key(mg.Target, mg.Version)] = true
	}
	var out []Status
	for k, r := range done {
		if !known[k] && slices.Contains(targets, r.target) {
			out = append(out, Status{Migration: Migration{Target: r.target, Version: r.version, Name: r.name}, AppliedAt: r.at, Newer: true})
		}
	}
	slices.SortFunc(out, func(a, b Status) int {
		if c := slices.Index(targets, a.Target) - slices.Index(targets, b.Target); c != 0 {
			return c
		}
		return a.Version - b.Version
	})
	return out
}

// Pending reports the migrations not yet applied, without changing anything
// (the tracking table may be absent: then every migration is pending).
func (m *Migrator) Pending(ctx context.Context) ([]Migration, error) {
	done, err := m.appliedOrNone(ctx)
	if err != nil {
		return nil, err
	}
	return m.pending(done), nil
}

// appliedOrNone returns the applied migrations; none when the tracking
// table is absent.
func (m *Migrator) appliedOrNone(ctx context.Context) (map[string]record, error) {
	done, err := m.applied(ctx, m.pool)
	if err != nil {
		if !m.missingTable(err) {
			return nil, fmt.Errorf("txbox: read %s: %w", trackingTable, err)
		}
		done = map[string]record{}
	}
	return done, nil
}

// pending returns the migrations not in done.
func (m *Migrator) pending(done map[string]record) []Migration {
	var out []Migration
	for _, mg := range m.migrations {
		if _, ok := done[key(mg.Target, mg.Version)]; !ok {
			out = append(out, mg)
		}
	}
	return out
}

// Up applies every pending migration, each in its own transaction with its
// tracking row (on MySQL, whose DDL commits implicitly, the row follows the
// DDL, and an Up interrupted in between is finished by the next one). It returns the migrations it applied. Concurrent Ups are safe on
// PostgreSQL, on a fresh schema too: they create the schema and the
// tracking table under an advisory lock, then serialise on a lock of the
// tracking table.
func (m *Migrator) Up(ctx context.Context) ([]Migration, error) {
	return m.UpTo(ctx, math.MaxInt)
}

// UpTo is Up for the migrations numbered up to version only: every
// configured table is taken to version at most.
func (m *Migrator) UpTo(ctx context.Context, version int) ([]Migration, error) {
	if err := m.ensureTracking(ctx); err != nil {
		return nil, err
	}
	var applied []Migration
	for _, mg := range m.migrations {
		if mg.Version > version {
			continue
		}
		did, err := m.apply(ctx, mg)
		if err != nil {
			return applied, fmt.Errorf("txbox: migration %s version %d (%s): %w", mg.Target, mg.Version, mg.Name, err)
		}
		if did {
			applied = append(applied, mg)
		}
	}
	return applied, nil
}

func (m *Migrator) apply(ctx context.Context, mg Migration) (bool, error) {
	return m.step(ctx, mg, false, func(tx txboxdriver.Tx) error {
		for _, stmt := range splitStatements(mg.SQL) {
			if _, err := tx.Exec(ctx, stmt); err != nil && !m.alreadyThere(err) {
				return err
			}
		}
		return m.sql.Record(ctx, tx, mg.Target, mg.Version, mg.Name, time.Now())
	})
}

// step runs body, which applies or reverts mg, in a transaction holding
// the migration lock, if mg's applied state is still wasApplied once the
// lock is held (a concurrent Up or Down may have done it meanwhile). It
// reports whether body ran and committed. When a statement of body gives
// up waiting for a table's lock (Config.LockTimeout), it tries again, up
// to Config.LockRetries more times.
func (m *Migrator) step(ctx context.Context, mg Migration, wasApplied bool, body func(txboxdriver.Tx) error) (bool, error) {
	for try := 1; ; try++ {
		did, err := m.stepOnce(ctx, mg, wasApplied, body)
		if err == nil || !m.sql.LockTimedOut(err) {
			return did, err
		}
		kind, table, _ := strings.Cut(mg.Target, ":")
		holders, herr := m.sql.Holders(ctx, m.pool, sqlname.Qualified(m.dialect, m.schema, table))
		switch {
		case herr != nil:
			holders = "cannot tell which: " + herr.Error()
		case holders == "" && m.dialect == txboxdriver.MySQL:
			holders = "SHOW PROCESSLIST lists them; MySQL 8's performance_schema.metadata_locks names the holder"
		case holders == "":
			holders = "none is holding it now"
		}
		if try > m.lockRetries {
			return false, fmt.Errorf("%w: waited %s for a lock on %s table %q, %d time(s); sessions holding it: %s (%w)",
				ErrLockTimeout, m.lockTimeout, kind, m.name(table), try, holders, err)
		}
		wait := backoff.Nth(time.Second, 15*time.Second, try)
		m.log.Warn("txbox migrate: another session's transaction is using the table; trying again",
			"migration", mg.Version, "table", m.name(table), "lock_timeout", m.lockTimeout, "try", try, "of", m.lockRetries+1,
			"retry_in", wait, "holders", holders)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

func (m *Migrator) stepOnce(ctx context.Context, mg Migration, wasApplied bool, body func(txboxdriver.Tx) error) (bool, error) {
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	unlock, err := m.sql.Lock(ctx, tx)
	if err != nil {
		return false, err
	}
	defer func() { _ = unlock(context.WithoutCancel(ctx)) }()
	restore := func(context.Context) error { return nil }
	if m.lockTimeout > 0 {
		if restore, err = m.sql.LockTimeout(ctx, tx, m.lockTimeout); err != nil {
			return false, err
		}
		defer func() { _ = restore(context.WithoutCancel(ctx)) }()
	}
	done, err := m.applied(ctx, tx)
	if err != nil {
		return false, err
	}
	if _, ok := done[key(mg.Target, mg.Version)]; ok != wasApplied {
		return false, nil
	}
	if err := body(tx); err != nil {
		return false, err
	}
	// Before the commit: after it the transaction can run nothing.
	if err := errors.Join(restore(ctx), unlock(ctx)); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// splitStatements splits a migration on semicolons at line ends, dropping
// comment-only lines; inside a $$-quoted body (a PL/pgSQL function) it does
// not split. Lines "-- txbox:begin" and "-- txbox:end" enclose one statement
// that holds semicolons of its own (a MySQL trigger's BEGIN … END body).
// Migrations hold no semicolons at line ends inside literals.
func splitStatements(sql string) []string {
	var out []string
	var b strings.Builder
	inBody, inBlock := false, false
	for _, line := range strings.Split(sql, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "-- txbox:begin":
			inBlock = true
			continue
		case t == "-- txbox:end":
			inBlock = false
			if s := strings.TrimSuffix(strings.TrimSpace(b.String()), ";"); s != "" {
				out = append(out, s)
			}
			b.Reset()
			continue
		case inBlock:
			b.WriteString(line)
			b.WriteByte('\n')
			continue
		}
		if t == "" || (!inBody && strings.HasPrefix(t, "--")) {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
		if strings.Count(line, "$$")%2 == 1 {
			inBody = !inBody
		}
		if !inBody && strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(b.String()), ";"))
			b.Reset()
		}
	}
	if s := strings.TrimSpace(b.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// lostConn is the error of a statement whose connection closed between
// two messages: a bare io.EOF, which pgx returns as it is. It wraps
// io.ErrUnexpectedEOF beside it, so that txboxdriver.IsTransient, and
// whoever retries a store on it (relay.Group.Add's caller, relay/supervise),
// count it as the database's failure.
type lostConn struct{ err error }

func (e *lostConn) Error() string   { return "the database connection was lost: " + e.err.Error() }
func (e *lostConn) Unwrap() []error { return []error{e.err, io.ErrUnexpectedEOF} }

// lost returns err, as a lostConn when it holds a bare io.EOF.
func lost(err error) error {
	var l *lostConn
	if err == nil || !errors.Is(err, io.EOF) || errors.As(err, &l) {
		return err
	}
	return &lostConn{err}
}
