package claimcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/migrate"
)

// Defaults of Config.
const (
	DefaultTable = "txbox_claim_check"
	// DefaultSweepBatch is how many rows one statement of Sweep deletes.
	DefaultSweepBatch = 1000
	// DefaultRetention is the retention `txbox claimcheck sweep` applies
	// unless told otherwise: a week.
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
}

// Store keeps payloads in a table of the database of drv. It is safe for
// concurrent use.
type Store struct {
	pool                 driver.Pool
	dialect              driver.Dialect
	table                string // quoted, qualified
	put, get, del, sweep string
	migrator             *migrate.Migrator
}

var _ txbox.ClaimCheck = (*Store)(nil)

// New returns a Store for the table cfg names in drv's database. The table
// must exist (see package migrate); New does not touch the database. The
// pool is drv's: whoever created it closes it.
func New[TTx any](drv driver.Driver[TTx], cfg Config) (*Store, error) {
	table := cfg.Table
	if table == "" {
		table = DefaultTable
	}
	d := drv.Dialect()
	if err := sqlname.Validate("claim check table", table); err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	if cfg.Schema != "" {
		if d != driver.Postgres {
			return nil, fmt.Errorf("%w: a schema is only supported on PostgreSQL", txbox.ErrInvalidConfig)
		}
		if err := sqlname.Validate("schema", cfg.Schema); err != nil {
			return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
		}
	}
	t := sqlname.Qualified(d, cfg.Schema, table)
	m, err := migrate.New(drv, migrate.Config{Schema: cfg.Schema, NoOutbox: true, ClaimCheckTables: []string{table}})
	if err != nil {
		return nil, err
	}
	s := &Store{pool: drv.Pool(), dialect: d, table: t, migrator: m}
	switch d {
	case driver.Postgres:
		s.put = "INSERT INTO " + t + " (ref, payload) VALUES ($1, $2)"
		s.get = "SELECT payload FROM " + t + " WHERE ref = $1"
		s.del = "DELETE FROM " + t + " WHERE ref = $1"
		s.sweep = "DELETE FROM " + t + " WHERE ref IN (SELECT ref FROM " + t + " WHERE created_at < now() - make_interval(secs => $1::bigint / 1e6) LIMIT $2)"
	case driver.SQLite:
		s.put = "INSERT INTO " + t + " (ref, payload) VALUES (?, ?)"
		s.get = "SELECT payload FROM " + t + " WHERE ref = ?"
		s.del = "DELETE FROM " + t + " WHERE ref = ?"
		s.sweep = "DELETE FROM " + t + " WHERE ref IN (SELECT ref FROM " + t + " WHERE created_at < CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER) - ? LIMIT ?)"
	case driver.MySQL:
		s.put = "INSERT INTO " + t + " (ref, payload) VALUES (?, ?)"
		s.get = "SELECT payload FROM " + t + " WHERE ref = ?"
		s.del = "DELETE FROM " + t + " WHERE ref = ?"
		s.sweep = "DELETE FROM " + t + " WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT ?"
	default:
		return nil, fmt.Errorf("%w: claimcheck: unsupported dialect %q", txbox.ErrInvalidConfig, d)
	}
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
func (s *Store) Put(ctx context.Context, ex driver.Executor, ref string, payload []byte) error {
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

// Sweep deletes the payloads stored longer ago than retention (by the
// database's clock), DefaultSweepBatch rows per statement, and returns how
// many it deleted. Choose retention longer than a message may wait to be
// delivered and handled: the outbox's retention of undelivered rows, the
// broker's redelivery and replay horizon, a consumer that is down; a
// message whose payload was swept is dead-lettered.
func (s *Store) Sweep(ctx context.Context, retention time.Duration) (int64, error) {
	if retention <= 0 {
		return 0, fmt.Errorf("%w: claimcheck: retention %v must be positive", txbox.ErrInvalidConfig, retention)
	}
	var total int64
	for {
		n, err := s.pool.Exec(ctx, s.sweep, retention.Microseconds(), DefaultSweepBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("claimcheck: sweep: %w", err)
		}
		if n < DefaultSweepBatch {
			return total, nil
		}
	}
}
