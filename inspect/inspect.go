// Package inspect reads an outbox table for operators: the backlog by
// state and topic ([Inspector.Backlog]), the undelivered rows with their
// attempts and last error ([Inspector.Pending]), and one row in full
// ([Inspector.Show]). It only reads; package dead redrives and discards.
// `txbox stats`, `txbox pending list` and `txbox dead show` print the same.
//
// The table keeps a row's last error only (last_error), not each attempt's:
// that is the error history there is.
package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/outboxtable"
	"github.com/txbox/txbox/txboxdriver"
)

// Defaults.
const (
	// DefaultLimit is how many rows Pending returns when Filter.Limit is 0.
	DefaultLimit = 100
	// TopTopics is how many topics Backlog lists.
	TopTopics = 10
)

// ErrNotFound is returned by Show for a seq that names no undelivered row.
var ErrNotFound = errors.New("txbox: no undelivered outbox row with this seq")

// State is where an undelivered row stands.
type State string

// The states of an undelivered row, disjoint.
const (
	// Pending: never attempted, due, and not parked.
	Pending State = "pending"
	// Scheduled: never attempted, and not due before NextAttemptAt, the
	// time its writer set (txbox.Message.DeliverAt); not parked.
	Scheduled State = "scheduled"
	// Retrying: the broker rejected it at least once; it is tried again
	// from NextAttemptAt.
	Retrying State = "retrying"
	// Parked: a dead row of its key holds it (see package dead).
	Parked State = "parked"
	// Dead: rejected MaxAttempts times (or invalid); no longer tried.
	Dead State = "dead"
	// Delivered: published, kept until the relay's retention removes it
	// (Find only).
	Delivered State = "delivered"
)

// Backlog is a snapshot of the table's undelivered rows.
type Backlog struct {
	// Pending, Retrying and Parked count the undelivered rows that are
	// not dead, by state; Dead the dead rows.
	Pending, Retrying, Parked, Dead int64
	// Scheduled is how many of the Pending rows are scheduled and not yet
	// due (state Scheduled in Pending's rows).
	Scheduled int64
	// ParkedKeys is how many ordering keys dead rows park.
	ParkedKeys int64
	// OldestPendingAge is the age (since created_at) of the oldest row
	// that is neither delivered nor dead, parked ones included: 0 when
	// there is none.
	OldestPendingAge time.Duration
	// OldestClaimableAge is the age of the oldest row a relay could claim
	// now (due, not parked): what delivery lags by.
	OldestClaimableAge time.Duration
	// Topics are the TopTopics topics with the most undelivered rows
	// (dead ones included), most first.
	Topics []TopicCount
}

// Undelivered is every row not yet delivered: pending, retrying, parked
// and dead.
func (b Backlog) Undelivered() int64 { return b.Pending + b.Retrying + b.Parked + b.Dead }

// TopicCount is one topic's share of the backlog.
type TopicCount struct {
	Topic       string
	Undelivered int64 // dead ones included
	Dead        int64
}

// Filter selects the rows Pending returns. The zero value selects up to
// DefaultLimit rows that are not dead.
type Filter struct {
	Topic       string // only this topic; "": any
	Key         string // only this ordering key; "": any
	MinAttempts int    // only rows the broker rejected at least this often
	Dead        bool   // dead rows too
	// Error, Since and After are read by Page only: rows whose last error
	// contains Error, created (dead rows: dead) at or after Since, with a
	// Seq above After (the last Seq of the page before).
	Error string
	Since time.Time
	After int64
	// Scheduled, read by Page only, selects the rows scheduled and not
	// yet due (txbox.Message.DeliverAt): never tried, their NextAttemptAt
	// ahead.
	Scheduled bool
	// Limit is the most rows returned; 0 means DefaultLimit. Negative is
	// an error.
	Limit int
}

// Row is an undelivered outbox row.
type Row struct {
	Seq      int64 // the row's id: what Show, dead redrive and discard take
	ID       string
	Topic    string
	Key      string
	State    State
	Attempts int
	// NextAttemptAt is when a retrying row is tried again, or when a
	// scheduled one is due; zero for a row due since it was written and for
	// a dead one (never tried again unless redriven).
	NextAttemptAt time.Time
	LastError     string // the broker's last rejection
	CreatedAt     time.Time
	DeadAt        time.Time     // zero unless State is Dead
	Age           time.Duration // since CreatedAt, when it was read
	// Invalid says why a column could not be read as txbox writes it (a
	// value of the wrong type stored by plain SQL), or is "".
	Invalid string
}

// Message is one undelivered row in full.
type Message struct {
	Row
	Payload []byte
	// Headers are the row's headers; RawHeaders their JSON text as stored,
	// kept because a plain-SQL writer may have stored something Headers
	// cannot hold (then Invalid says so).
	Headers    map[string]string
	RawHeaders string
}

// Inspector reads one outbox table.
type Inspector struct {
	store *outboxsql.Store
	find  *outboxsql.Finder
}

// New returns an Inspector for the outbox table cfg names (Schema, Table),
// or, when drv is a *txbox.Outbox and cfg names none, for that outbox's
// table.
func New[TTx any](drv txboxdriver.Driver[TTx], cfg txbox.Config) (*Inspector, error) {
	var err error
	if cfg.Schema, cfg.Table, err = outboxtable.Of(drv, cfg.Schema, cfg.Table); err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	table, err := cfg.TableName(drv.Dialect())
	if err != nil {
		return nil, err
	}
	store, err := outboxsql.NewStore(drv.Dialect(), drv.Pool(), table, time.Minute)
	if err != nil {
		return nil, err
	}
	find, err := outboxsql.NewFinder(drv.Dialect(), drv.Pool(), table)
	if err != nil {
		return nil, err
	}
	return &Inspector{store: store, find: find}, nil
}

// Backlog reads the counts by state and the ages in one statement (the
// relay's backlog sample), then the top topics in a second.
func (in *Inspector) Backlog(ctx context.Context) (Backlog, error) {
	b, err := in.store.Backlog(ctx)
	if err != nil {
		return Backlog{}, fmt.Errorf("txbox/inspect: backlog: %w", err)
	}
	topics, err := in.store.BacklogTopics(ctx, TopTopics)
	if err != nil {
		return Backlog{}, fmt.Errorf("txbox/inspect: backlog topics: %w", err)
	}
	out := Backlog{
		Pending: b.Pending, Retrying: b.Retrying, Parked: b.Parked, Dead: b.Dead, ParkedKeys: b.ParkedKeys, Scheduled: b.Scheduled,
		OldestPendingAge: b.OldestPendingAge, OldestClaimableAge: b.OldestClaimableAge,
		Topics: make([]TopicCount, len(topics)),
	}
	for i, t := range topics {
		out.Topics[i] = TopicCount(t)
	}
	return out, nil
}

// Table is the outbox table's upkeep on PostgreSQL, which the relay's speed
// depends on: each delivered row leaves a dead row version, and an index
// entry that every claim steps over until VACUUM removes it; VACUUM can
// remove none made after the oldest snapshot still open in the database.
type Table struct {
	Size, IndexSize    int64 // bytes: the table with indexes and TOAST; its indexes
	LiveRows, DeadRows int64 // row versions, PostgreSQL's estimates
	// SinceVacuum is the time since the table's last VACUUM, manual or
	// auto; Vacuumed is false when it never had one.
	SinceVacuum time.Duration
	Vacuumed    bool
	// OldestTransaction is how long the database's oldest transaction
	// holding a snapshot (a session's or a prepared one) has been open;
	// 0: none.
	OldestTransaction time.Duration
	// Oldest is what holds the database's horizon furthest back (a
	// session's transaction, a prepared transaction, a replication slot),
	// or nil: the inspector's own session excepted.
	Oldest *Snapshot
}

// Snapshot is what holds back the horizon up to which VACUUM may remove
// row versions.
type Snapshot struct {
	Kind    string        // "transaction", "prepared transaction" or "replication slot"
	Holder  string        // a pid and its application name, a gid, a slot name
	State   string        // a session's state ("idle in transaction", "active"…), a slot's ("active", "inactive")
	Age     time.Duration // since the transaction began; 0 for a slot
	XminAge int64         // transactions begun since the snapshot's xmin
}

// Table reads the table's size, dead row versions and last VACUUM, and the
// oldest snapshot of the database. PostgreSQL only: elsewhere it returns an
// error wrapping errors.ErrUnsupported.
func (in *Inspector) Table(ctx context.Context) (Table, error) {
	h, err := in.store.Health(ctx)
	if err != nil {
		return Table{}, fmt.Errorf("txbox/inspect: %w", err)
	}
	t := Table{Size: h.Size, IndexSize: h.IndexSize, LiveRows: h.LiveRows, DeadRows: h.DeadRows, SinceVacuum: h.SinceVacuum, Vacuumed: h.Vacuumed,
		OldestTransaction: h.OldestTransaction}
	if h.Oldest != nil {
		o := Snapshot(*h.Oldest)
		t.Oldest = &o
	}
	return t, nil
}

// Pending returns the undelivered rows f selects, oldest first: pending,
// retrying and parked ones, and dead ones with f.Dead. A row the broker
// keeps rejecting shows here, with its attempts and last error, before it
// goes dead (or forever, with MaxAttempts off).
func (in *Inspector) Pending(ctx context.Context, f Filter) ([]Row, error) {
	switch {
	case f.Limit < 0:
		return nil, fmt.Errorf("%w: inspect: Limit %d is negative", txbox.ErrInvalidConfig, f.Limit)
	case f.MinAttempts < 0:
		return nil, fmt.Errorf("%w: inspect: MinAttempts %d is negative", txbox.ErrInvalidConfig, f.MinAttempts)
	case f.Limit == 0:
		f.Limit = DefaultLimit
	}
	rows, err := in.store.Pending(ctx, outboxsql.PendingFilter{
		Topic: f.Topic, Key: f.Key, MinAttempts: f.MinAttempts, Dead: f.Dead, Limit: f.Limit,
	})
	if err != nil {
		return nil, fmt.Errorf("txbox/inspect: pending: %w", err)
	}
	now := time.Now()
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = row(r, now)
	}
	return out, nil
}

// Found is one row Find found, in any state.
type Found struct {
	Message
	// PublishedAt is when a Delivered row was published.
	PublishedAt time.Time
	// ParkedBy is the seq of the dead row of its key that a Parked row
	// waits behind (0 if it went meanwhile).
	ParkedBy int64
}

// Find returns the rows, in any state (delivered ones while the table
// keeps them), whose message id is ref or, when ref is a positive
// integer, whose seq is ref; oldest first, none when there are none.
func (in *Inspector) Find(ctx context.Context, ref string) ([]Found, error) {
	seq, _ := strconv.ParseInt(ref, 10, 64)
	rows, err := in.find.Locate(ctx, max(seq, 0), ref)
	if err != nil {
		return nil, fmt.Errorf("txbox/inspect: find %q: %w", ref, err)
	}
	now := time.Now()
	out := make([]Found, len(rows))
	for i, r := range rows {
		m := Message{Row: row(r.PendingRow, now), Payload: r.Payload, RawHeaders: string(r.Headers)}
		if len(r.Headers) > 0 && string(r.Headers) != "{}" {
			if err := json.Unmarshal([]byte(r.Headers), &m.Headers); err != nil && m.Invalid == "" {
				m.Headers = nil
				m.Invalid = fmt.Sprintf("headers are not a JSON object of strings: %v", err)
			}
		}
		f := Found{Message: m, PublishedAt: r.PublishedAt}
		if !r.PublishedAt.IsZero() {
			f.State, f.NextAttemptAt = Delivered, time.Time{}
		}
		if f.State == Parked {
			if f.ParkedBy, err = in.find.ParkedBy(ctx, r.Key); err != nil {
				return nil, fmt.Errorf("txbox/inspect: find %q: %w", ref, err)
			}
		}
		out[i] = f
	}
	return out, nil
}

// Throughput counts the messages delivered, and the messages gone dead,
// within the window before now, from the table's published_at and
// dead_at (rows delivered and removed since, with relay --retention 0,
// are not counted). It reads every delivered or dead row.
func (in *Inspector) Throughput(ctx context.Context, window time.Duration) (delivered, dead int64, err error) {
	delivered, dead, err = in.find.Throughput(ctx, time.Now().Add(-window))
	if err != nil {
		return 0, 0, fmt.Errorf("txbox/inspect: throughput: %w", err)
	}
	return delivered, dead, nil
}

// Page is Pending with f.Error, f.Since and f.After, without payloads, and
// whether more rows match after the ones returned.
func (in *Inspector) Page(ctx context.Context, f Filter) ([]Row, bool, error) {
	switch {
	case f.Limit < 0:
		return nil, false, fmt.Errorf("%w: inspect: Limit %d is negative", txbox.ErrInvalidConfig, f.Limit)
	case f.Limit == 0:
		f.Limit = DefaultLimit
	}
	now := time.Now()
	find := outboxsql.Find{After: f.After, Topic: f.Topic, Key: f.Key, Error: f.Error,
		Since: f.Since, MinAttempts: f.MinAttempts, Limit: f.Limit}
	if f.Scheduled {
		find.DueAfter = now
	}
	rows, more, err := in.find.Undelivered(ctx, find, f.Dead)
	if err != nil {
		return nil, false, fmt.Errorf("txbox/inspect: pending: %w", err)
	}
	out := make([]Row, len(rows))
	for i, r := range rows {
		out[i] = row(r, now)
	}
	return out, more, nil
}

// Show returns the undelivered row seq (dead or not) in full, or an error
// wrapping ErrNotFound when there is none (a seq never used, or a row
// delivered or discarded since).
func (in *Inspector) Show(ctx context.Context, seq int64) (Message, error) {
	if seq <= 0 {
		return Message{}, fmt.Errorf("%w: inspect: seq %d is not a row id (want a positive integer)", txbox.ErrInvalidConfig, seq)
	}
	rows, err := in.store.Pending(ctx, outboxsql.PendingFilter{Seq: seq, Dead: true, Limit: 1})
	if err != nil {
		return Message{}, fmt.Errorf("txbox/inspect: show %d: %w", seq, err)
	}
	if len(rows) == 0 {
		return Message{}, fmt.Errorf("%w: %d", ErrNotFound, seq)
	}
	r := rows[0]
	m := Message{Row: row(r, time.Now()), Payload: r.Payload, RawHeaders: r.Headers}
	if r.Headers != "" && r.Headers != "{}" {
		if err := json.Unmarshal([]byte(r.Headers), &m.Headers); err != nil && m.Invalid == "" {
			m.Headers = nil
			m.Invalid = fmt.Sprintf("headers are not a JSON object of strings: %v", err)
		}
	}
	return m, nil
}

func row(r outboxsql.PendingRow, now time.Time) Row {
	out := Row{
		Seq: r.Seq, ID: r.ID, Topic: r.Topic, Key: r.Key, Attempts: r.Attempts,
		NextAttemptAt: r.NextAttemptAt, LastError: r.LastError, CreatedAt: r.CreatedAt, DeadAt: r.DeadAt,
		Age: max(now.Sub(r.CreatedAt), 0),
	}
	switch {
	case !r.DeadAt.IsZero():
		out.State, out.NextAttemptAt = Dead, time.Time{}
	case r.Parked:
		out.State = Parked
	case r.Attempts > 0:
		out.State = Retrying
	case r.NextAttemptAt.After(now):
		out.State = Scheduled
	default:
		out.State = Pending
	}
	if r.Invalid != nil {
		out.Invalid = r.Invalid.Error()
	}
	return out
}
