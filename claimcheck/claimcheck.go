package claimcheck

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
)

// Defaults of Config.
const (
	DefaultTable = "txbox_claim_check"
	// DefaultSweepBatch is how many rows one statement of Sweep deletes.
	DefaultSweepBatch = 1000
	// DefaultRetention is the default of Config.Retention: a week.
	DefaultRetention = 7 * 24 * time.Hour
)

// Config configures a Store.
type Config struct {
	// Schema is the PostgreSQL schema of the table. Default: "" (the
	// connection's search_path).
	Schema string
	// Table is the claim check table, validated as an SQL identifier.
	// Default: DefaultTable ("txbox_claim_check").
	Table string
	// OutboxTables are the outbox tables (in Schema) whose messages refer
	// to this table's payloads: Sweep keeps a payload while a row of one
	// of them that refers to it is still to deliver or dead. Default:
	// txbox.DefaultTable ("txbox_outbox").
	OutboxTables []string
	// Retention is how long a payload is kept once its message was
	// delivered (see Sweep): longer than a consumer may take to handle
	// it. Default: DefaultRetention (168h).
	Retention time.Duration
}

// Store keeps payloads in a table of the database of drv. It is safe for
// concurrent use.
type Store struct {
	pool                txboxdriver.Pool
	dialect             txboxdriver.Dialect
	table               string // quoted, qualified
	put, get, del       string
	held                []string // per outbox table: the headers of its rows still to deliver or dead that may name a reference
	unreleased, release string
	due, rehold         string
	sweep, stats        string
	migrator            *txboxmigrate.Migrator
	retention           time.Duration
}

var _ txbox.ClaimCheck = (*Store)(nil)

// New returns a Store for the table cfg names in drv's database. The table
// must exist (see package txboxmigrate); New does not touch the database. The
// pool is drv's: whoever created it closes it.
func New[TTx any](drv txboxdriver.Driver[TTx], cfg Config) (*Store, error) {
	table := cfg.Table
	if table == "" {
		table = DefaultTable
	}
	d := drv.Dialect()
	if err := sqlname.Validate("claim check table", table); err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	if cfg.Schema != "" {
		if d != txboxdriver.Postgres {
			return nil, fmt.Errorf("%w: a schema is only supported on PostgreSQL", txbox.ErrInvalidConfig)
		}
		if err := sqlname.Validate("schema", cfg.Schema); err != nil {
			return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
		}
	}
	t := sqlname.Qualified(d, cfg.Schema, table)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{Schema: cfg.Schema, NoOutbox: true, ClaimCheckTables: []string{table}})
	if err != nil {
		return nil, err
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("%w: claimcheck: retention %v is negative", txbox.ErrInvalidConfig, cfg.Retention)
	}
	s := &Store{pool: drv.Pool(), dialect: d, table: t, migrator: m, retention: cmp.Or(cfg.Retention, DefaultRetention)}
	outboxes := cfg.OutboxTables
	if len(outboxes) == 0 {
		outboxes = []string{txbox.DefaultTable}
	}
	// The clock of each dialect, as the table's created_at is written.
	var now, ago, size, oldest string
	big := func(x string) string { return x }
	switch d {
	case txboxdriver.Postgres:
		big = func(x string) string { return "CAST(" + x + " AS bigint)" }
		oldest = "COALESCE(CAST(EXTRACT(EPOCH FROM now() - min(created_at)) * 1000000 AS bigint), 0)"
		s.put = "INSERT INTO " + t + " (ref, payload) VALUES ($1, $2)"
		s.get = "SELECT payload FROM " + t + " WHERE ref = $1"
		s.del = "DELETE FROM " + t + " WHERE ref = $1"
		now, ago, size = "now()", "now() - make_interval(secs => $1::bigint / 1e6)", "octet_length(payload)"
	case txboxdriver.SQLite:
		s.put = "INSERT INTO " + t + " (ref, payload) VALUES (?, ?)"
		s.get = "SELECT payload FROM " + t + " WHERE ref = ?"
		s.del = "DELETE FROM " + t + " WHERE ref = ?"
		now = "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"
		ago, size = now+" - ?", "length(payload)"
		oldest = "COALESCE(" + now + " - min(created_at), 0)"
	case txboxdriver.MySQL:
		s.put = "INSERT INTO " + t + " (ref, payload) VALUES (?, ?)"
		s.get = "SELECT payload FROM " + t + " WHERE ref = ?"
		s.del = "DELETE FROM " + t + " WHERE ref = ?"
		now, ago, size = "UTC_TIMESTAMP(6)", "UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND", "LENGTH(payload)"
		oldest = "COALESCE(TIMESTAMPDIFF(MICROSECOND, min(created_at), UTC_TIMESTAMP(6)), 0)"
	default:
		return nil, fmt.Errorf("%w: claimcheck: unsupported dialect %q", txbox.ErrInvalidConfig, d)
	}
	for _, ob := range outboxes {
		if err := sqlname.Validate("outbox table", ob); err != nil {
			return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
		}
		// The header's name in any case, as the consumer reads it; the
		// headers are parsed in Go (held).
		o := sqlname.Qualified(d, cfg.Schema, ob)
		switch d {
		case txboxdriver.Postgres:
			s.held = append(s.held, "SELECT headers::text FROM "+o+" WHERE published_at IS NULL AND lower(headers::text) LIKE '%txbox-claim-check%'")
		case txboxdriver.SQLite:
			s.held = append(s.held, "SELECT headers FROM "+o+" WHERE published_at IS NULL AND headers LIKE '%txbox-claim-check%'")
		case txboxdriver.MySQL:
			s.held = append(s.held, "SELECT CAST(headers AS CHAR) FROM "+o+" WHERE published_at IS NULL AND LOWER(CAST(headers AS CHAR)) LIKE '%txbox-claim-check%'")
		}
	}
	s.unreleased = "SELECT ref FROM " + t + " WHERE released_at IS NULL"
	s.release = "UPDATE " + t + " SET released_at = " + now + " WHERE released_at IS NULL AND ref IN "
	s.rehold = "UPDATE " + t + " SET released_at = NULL WHERE ref IN "
	s.due = "SELECT ref FROM " + t + " WHERE released_at < " + ago + " ORDER BY released_at LIMIT " + s.placeholder(2)
	s.sweep = "DELETE FROM " + t + " WHERE released_at < " + ago + " AND ref IN "
	s.stats = "SELECT count(*), " + big("COALESCE(sum("+size+"), 0)") + ", " + oldest + ", " +
		big("COALESCE(sum(CASE WHEN released_at IS NULL THEN 1 ELSE 0 END), 0)") + ", " +
		big("COALESCE(sum(CASE WHEN released_at < "+ago+" THEN 1 ELSE 0 END), 0)") + ", " +
		big("COALESCE(sum(CASE WHEN released_at < "+ago+" THEN "+size+" ELSE 0 END), 0)") + " FROM " + t
	return s, nil
}

// Check reports what is wrong with the table: missing, its migrations not
// all applied, its columns changed. The consumer runs it at start-up
// (consumer.Config.ClaimCheck) and lists the problems in its
// StartupError.
func (s *Store) Check(ctx context.Context) []string {
	return s.migrator.Check(ctx)
}

// Put stores payload under ref through ex, the transaction the message is
// added in (the pool when ex is nil).
func (s *Store) Put(ctx context.Context, ex txboxdriver.Executor, ref string, payload []byte) error {
	if ref == "" {
		return errors.New("claimcheck: empty reference")
	}
	if ex == nil {
		ex = s.pool
	}
	if payload == nil {
		payload = []byte{}
	}
	if _, err := ex.Exec(ctx, s.put, ref, payload); err != nil {
		return fmt.Errorf("claimcheck: put %s: %w", ref, err)
	}
	return nil
}

// Get returns the payload stored under ref, or an error wrapping
// txbox.ErrClaimNotFound.
func (s *Store) Get(ctx context.Context, ref string) ([]byte, error) {
	rows, err := s.pool.Query(ctx, s.get, ref)
	if err != nil {
		return nil, fmt.Errorf("claimcheck: get %s: %w", ref, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("claimcheck: get %s: %w", ref, err)
		}
		return nil, fmt.Errorf("claimcheck: %w: %s in %s", txbox.ErrClaimNotFound, ref, s.table)
	}
	var payload []byte
	if err := rows.Scan(&payload); err != nil {
		return nil, fmt.Errorf("claimcheck: get %s: %w", ref, err)
	}
	if payload == nil {
		payload = []byte{}
	}
	return payload, rows.Err()
}

// Delete removes the payloads stored under refs.
func (s *Store) Delete(ctx context.Context, refs ...string) error {
	for _, ref := range refs {
		if _, err := s.pool.Exec(ctx, s.del, ref); err != nil {
			return fmt.Errorf("claimcheck: delete %s: %w", ref, err)
		}
	}
	return nil
}

// placeholder is the i-th (from 1) parameter of a statement.
func (s *Store) placeholder(i int) string {
	if s.dialect == txboxdriver.Postgres {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

// in returns "(…)", a list of n parameters from the first-th on.
func (s *Store) in(first, n int) string {
	var b strings.Builder
	b.WriteByte('(')
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.placeholder(first + i))
	}
	b.WriteByte(')')
	return b.String()
}

// agoArgs are the arguments of a statement whose time parameter (the
// first) appears n times: once on PostgreSQL ($1), n times elsewhere.
func (s *Store) agoArgs(retention time.Duration, n int) []any {
	if s.dialect == txboxdriver.Postgres {
		n = 1
	}
	args := make([]any, n)
	for i := range args {
		args[i] = retention.Microseconds()
	}
	return args
}

// refChunk bounds the references one statement lists.
const refChunk = 500

// Sweep deletes the payloads both sides are done with, DefaultSweepBatch
// rows per statement, and returns how many it deleted:
//
//   - the producer's side is done once no row of the outbox tables
//     (Config.OutboxTables) that refers to the payload is still to
//     deliver or dead (a dead row may be redriven). Sweep then marks the
//     payload released, at the database's clock;
//   - the consumers' side is given retention from then: txbox cannot see
//     every consumer of a message (several bindings, a broker's
//     redelivery and replay, a consumer that is down, a dead letter
//     redriven), so retention must exceed the time a consumer may take to
//     handle a message once it is delivered.
//
// A payload released more than retention ago is deleted, unless a row
// still to deliver or dead refers to it again (a plain-SQL writer that
// reused it; it is then held again). A message whose payload was swept is
// dead-lettered when it arrives. Sweep reads the outbox tables' rows still
// to deliver or dead once per call. A retention of 0 is Config.Retention.
// A relay's cleanup runs it for the stores of relay.Config.ClaimChecks,
// and `txbox claimcheck sweep`.
func (s *Store) Sweep(ctx context.Context, retention time.Duration) (int64, error) {
	retention = cmp.Or(retention, s.retention)
	if retention < 0 {
		return 0, fmt.Errorf("%w: claimcheck: retention %v must be positive", txbox.ErrInvalidConfig, retention)
	}
	// The payloads not yet released are read before the outbox rows: a
	// payload committed with its message is then either among those rows
	// or its message was delivered.
	unreleased, err := s.refs(ctx, s.unreleased)
	if err != nil {
		return 0, fmt.Errorf("claimcheck: sweep %s: %w", s.table, err)
	}
	held, err := s.Held(ctx)
	if err != nil {
		return 0, fmt.Errorf("claimcheck: sweep %s: %w", s.table, err)
	}
	var free []any
	for _, ref := range unreleased {
		if _, ok := held[ref]; !ok {
			free = append(free, ref)
		}
	}
	for len(free) > 0 {
		chunk := free[:min(len(free), refChunk)]
		free = free[len(chunk):]
		if _, err := s.pool.Exec(ctx, s.release+s.in(1, len(chunk)), chunk...); err != nil {
			return 0, fmt.Errorf("claimcheck: sweep %s: release: %w", s.table, err)
		}
	}
	var total int64
	for {
		due, err := s.refs(ctx, s.due, append(s.agoArgs(retention, 1), DefaultSweepBatch)...)
		if err != nil {
			return total, fmt.Errorf("claimcheck: sweep %s: %w", s.table, err)
		}
		var del, again []any
		for _, ref := range due {
			if _, ok := held[ref]; ok {
				again = append(again, ref)
			} else {
				del = append(del, ref)
			}
		}
		if len(again) > 0 {
			if _, err := s.pool.Exec(ctx, s.rehold+s.in(1, len(again)), again...); err != nil {
				return total, fmt.Errorf("claimcheck: sweep %s: hold: %w", s.table, err)
			}
		}
		for len(del) > 0 {
			chunk := del[:min(len(del), refChunk)]
			del = del[len(chunk):]
			args := append(s.agoArgs(retention, 1), chunk...)
			n, err := s.pool.Exec(ctx, s.sweep+s.in(2, len(chunk)), args...)
			total += n
			if err != nil {
				return total, fmt.Errorf("claimcheck: sweep %s: %w", s.table, err)
			}
		}
		if len(due) < DefaultSweepBatch {
			return total, nil
		}
	}
}

// refs runs a query of one text column.
func (s *Store) refs(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ref string
		if err := rows.Scan(&ref); err != nil {
			return nil, err
		}
		out = append(out, ref)
	}
	return out, rows.Err()
}

// Held returns the references that rows of the outbox tables still to
// deliver or dead carry (txbox.HeaderClaimCheck, in any case): the
// payloads Sweep keeps whatever their age.
func (s *Store) Held(ctx context.Context) (map[string]struct{}, error) {
	held := map[string]struct{}{}
	for _, q := range s.held {
		texts, err := s.refs(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("read the outbox rows still to deliver: %w", err)
		}
		for _, text := range texts {
			var hs map[string]any
			if json.Unmarshal([]byte(text), &hs) != nil {
				continue // not an object: the relay parks such a row as invalid, no reference
			}
			for k, v := range hs {
				if ref, ok := v.(string); ok && strings.EqualFold(k, txbox.HeaderClaimCheck) {
					held[ref] = struct{}{}
				}
			}
		}
	}
	return held, nil
}

// Stats are the figures of a claim check table (Store.Stats).
type Stats struct {
	Payloads  int64         // payloads stored
	Bytes     int64         // their size
	OldestAge time.Duration // age of the oldest stored payload (0: none)
	// Unreleased payloads: their message is still to deliver or dead, or
	// no sweep has looked since it was delivered.
	Unreleased int64
	// Due and DueBytes are what the next Sweep with the same retention
	// deletes: payloads released more than retention ago (less any a row
	// still to deliver refers to again).
	Due      int64
	DueBytes int64
}

// Stats reads the table's figures, as Sweep with retention (0:
// Config.Retention) sees them. It reads every row's size: one scan of the
// table.
func (s *Store) Stats(ctx context.Context, retention time.Duration) (Stats, error) {
	retention = cmp.Or(retention, s.retention)
	var st Stats
	var oldest int64
	rows, err := s.pool.Query(ctx, s.stats, s.agoArgs(retention, 2)...)
	if err != nil {
		return st, fmt.Errorf("claimcheck: stats: %w", err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&st.Payloads, &st.Bytes, &oldest, &st.Unreleased, &st.Due, &st.DueBytes); err != nil {
			return st, fmt.Errorf("claimcheck: stats: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("claimcheck: stats: %w", err)
	}
	st.OldestAge = time.Duration(oldest) * time.Microsecond
	return st, nil
}
