package cdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors of the slot checks, matched with errors.Is.
var (
	// ErrSlotMissing: the slot does not exist (create it with CreateSlot
	// or `txbox slot create`).
	ErrSlotMissing = errors.New("txbox cdc: replication slot missing")
	// ErrSlotLost: the server removed WAL the slot still needed
	// (wal_status lost, or the slot was invalidated): events committed
	// since its confirmed LSN may never be read from the log.
	ErrSlotLost = errors.New("txbox cdc: replication slot lost")
	// ErrNotLogical: the server's wal_level is not logical.
	ErrNotLogical = errors.New("txbox cdc: wal_level is not logical")
)

// SlotStatus is what the server says of a relay's slot and publication.
type SlotStatus struct {
	Slot        string
	Publication string
	// Exists: the slot exists; the fields below up to Lag are zero
	// otherwise.
	Exists bool
	// Plugin is the slot's output plugin (pgoutput for txbox).
	Plugin string
	// Active: a reader streams from the slot now, as ActivePID.
	Active    bool
	ActivePID int
	// ConfirmedFlushLSN is what the relay confirmed: every event committed
	// at or before it was acknowledged by the broker. RestartLSN is the
	// oldest WAL the slot keeps.
	ConfirmedFlushLSN string
	RestartLSN        string
	// WALStatus is the server's wal_status: reserved, extended,
	// unreserved or lost.
	WALStatus string
	// SafeWALSize is how many bytes of WAL may still be written before
	// the slot is in danger of losing WAL (max_slot_wal_keep_size), or -1
	// when unbounded.
	SafeWALSize int64
	// Invalidation is why the server invalidated the slot
	// (invalidation_reason, PostgreSQL 17 and later; "conflicting" on 16),
	// or "".
	Invalidation string
	// LagBytes is how far the confirmed LSN is behind the server's
	// current WAL position.
	LagBytes int64
	// FlushLagSeconds is the server's flush_lag of the reader
	// (pg_stat_replication): the time between the server writing recent
	// WAL and the reader confirming it; -1 when no reader streams or the
	// server has no recent measurement (an idle, caught-up stream).
	FlushLagSeconds float64
	// PublicationExists: the publication exists and publishes the table.
	PublicationExists bool
}

// Lost returns why the slot cannot be read from any more, or "".
func (s *SlotStatus) Lost() string {
	switch {
	case s.Invalidation != "":
		return "invalidated by the server (" + s.Invalidation + ")"
	case s.WALStatus == "lost":
		return "wal_status is lost: the server removed WAL the slot still needed (max_slot_wal_keep_size)"
	}
	return ""
}

// Status reads the slot and publication of cfg.
func Status(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*SlotStatus, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	return status(ctx, pool, n)
}

// querier is a pool or a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func status(ctx context.Context, q querier, n names) (*SlotStatus, error) {
	st := &SlotStatus{Slot: n.slot, Publication: n.publication}
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables
	   WHERE pubname = $1 AND tablename = $2 AND schemaname = coalesce(nullif($3, ''), current_schema()))`,
		n.publication, n.bareTable, n.schema).Scan(&st.PublicationExists)
	if err != nil {
		return nil, fmt.Errorf("read publication %s: %w", n.publication, err)
	}
	// to_jsonb: the view's columns differ between major versions.
	var row []byte
	var lag *int64
	err = q.QueryRow(ctx, `SELECT to_jsonb(s),
	       CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint END
	  FROM pg_replication_slots s WHERE slot_name = $1`, n.slot).Scan(&row, &lag)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read replication slot %s: %w", n.slot, err)
	}
	var v struct {
		Plugin             string  `json:"plugin"`
		SlotType           string  `json:"slot_type"`
		Active             bool    `json:"active"`
		ActivePID          *int    `json:"active_pid"`
		ConfirmedFlushLSN  *string `json:"confirmed_flush_lsn"`
		RestartLSN         *string `json:"restart_lsn"`
		WALStatus          *string `json:"wal_status"`
		SafeWALSize        *int64  `json:"safe_wal_size"`
		InvalidationReason *string `json:"invalidation_reason"`
		Conflicting        *bool   `json:"conflicting"`
	}
	if err := json.Unmarshal(row, &v); err != nil {
		return nil, fmt.Errorf("read replication slot %s: %w", n.slot, err)
	}
	st.Exists = true
	st.Plugin, st.Active = v.Plugin, v.Active
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	if v.ActivePID != nil {
		st.ActivePID = *v.ActivePID
	}
	st.ConfirmedFlushLSN, st.RestartLSN, st.WALStatus = str(v.ConfirmedFlushLSN), str(v.RestartLSN), str(v.WALStatus)
	st.SafeWALSize = -1
	if v.SafeWALSize != nil {
		st.SafeWALSize = *v.SafeWALSize
	}
	st.Invalidation = str(v.InvalidationReason)
	if st.Invalidation == "" && v.Conflicting != nil && *v.Conflicting {
		st.Invalidation = "conflicting"
	}
	if lag != nil {
		st.LagBytes = *lag
	}
	st.FlushLagSeconds = -1
	if st.ActivePID != 0 {
		var secs *float64
		err := q.QueryRow(ctx, `SELECT extract(epoch FROM flush_lag)::float8 FROM pg_stat_replication WHERE pid = $1`, st.ActivePID).Scan(&secs)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("read pg_stat_replication of slot %s: %w", n.slot, err)
		}
		if secs != nil {
			st.FlushLagSeconds = *secs
		}
	}
	return st, nil
}

// CreateSlot creates what the relay of cfg reads through, where missing:
// the publication of the outbox table's inserts and the logical
// replication slot (pgoutput). The slot starts at the server's current WAL
// position: rows inserted before it are not read (drain them with the
// polling relay first). It needs wal_level=logical and a role with the
// REPLICATION attribute that owns the table (or may create publications
// on it). It returns the status after.
func CreateSlot(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*SlotStatus, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	if err := checkWALLevel(ctx, pool); err != nil {
		return nil, err
	}
	st, err := status(ctx, pool, n)
	if err != nil {
		return nil, err
	}
	if !st.PublicationExists {
		_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`, quote(n.publication), n.table))
		var pg *pgconn.PgError
		if err != nil && !(errors.As(err, &pg) && pg.Code == "42710") { // duplicate_object: a concurrent create
			return nil, fmt.Errorf("create publication %s: %w", n.publication, err)
		}
	}
	if !st.Exists {
		_, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, n.slot)
		var pg *pgconn.PgError
		if err != nil && !(errors.As(err, &pg) && pg.Code == "42710") {
			return nil, fmt.Errorf("create replication slot %s: %w", n.slot, err)
		}
	}
	return status(ctx, pool, n)
}

// DropSlot drops the slot and the publication of cfg, where they exist.
// The server then keeps no WAL for the relay; rows committed since the
// slot's confirmed LSN are no longer read from the log (the polling relay
// still finds them in the table). A slot a reader streams from is not
// dropped: stop the relay first.
func DropSlot(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	n, err := cfg.names()
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, n.slot)
	if err != nil {
		return fmt.Errorf("drop replication slot %s: %w", n.slot, err)
	}
	if _, err := pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+quote(n.publication)); err != nil {
		return fmt.Errorf("drop publication %s: %w", n.publication, err)
	}
	return nil
}

func checkWALLevel(ctx context.Context, q querier) error {
	var level string
	if err := q.QueryRow(ctx, `SELECT current_setting('wal_level')`).Scan(&level); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("%w: the server's wal_level is %q: set wal_level = logical (postgresql.conf or ALTER SYSTEM) and restart the server", ErrNotLogical, level)
	}
	return nil
}

// checkSlot refuses a slot that is missing, of another plugin, or lost.
func checkSlot(st *SlotStatus) error {
	if !st.Exists {
		return fmt.Errorf("%w: %s does not exist: create it with `txbox slot create` (or cdc.CreateSlot); it starts at the server's current WAL position", ErrSlotMissing, st.Slot)
	}
	if st.Plugin != "pgoutput" {
		return fmt.Errorf("replication slot %s uses the plugin %q: the txbox relay reads pgoutput; drop it or name another slot", st.Slot, st.Plugin)
	}
	if why := st.Lost(); why != "" {
		return fmt.Errorf("%w: %s is %s. Events committed after its confirmed LSN %s may be missing from the log and will not be read from it. "+
			"To recover: run the polling relay (txbox relay without --cdc) to deliver what the table still holds, "+
			"then `txbox slot drop` and `txbox slot create`; raise max_slot_wal_keep_size or alert on slot lag so that it does not recur",
			ErrSlotLost, st.Slot, why, st.ConfirmedFlushLSN)
	}
	if !st.PublicationExists {
		return fmt.Errorf("%w: the publication %s does not publish the outbox table: run `txbox slot create`", ErrSlotMissing, st.Publication)
	}
	return nil
}

// quote quotes a validated identifier.
func quote(name string) string { return `"` + name + `"` }

// Check returns what would stop a relay of cfg at its start: wal_level
// not logical, a missing slot or publication, a slot of another plugin, a
// lost or invalidated slot; nil when none.
func Check(ctx context.Context, pool *pgxpool.Pool, cfg Config) error {
	n, err := cfg.names()
	if err != nil {
		return err
	}
	if err := checkWALLevel(ctx, pool); err != nil {
		return err
	}
	st, err := status(ctx, pool, n)
	if err != nil {
		return err
	}
	return checkSlot(st)
}
