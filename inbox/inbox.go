package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/txbox/txbox/internal/inboxsql"
	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/txboxdriver"
)

// Defaults of Config.
const (
	DefaultRetention        = 30 * 24 * time.Hour
	DefaultMaxMetadataBytes = 64 << 10
	DefaultMaxIDLen         = 256
	DefaultMaxSourceLen     = 256
	DefaultSweepBatchSize   = 1000
)

// Config configures an Inbox.
type Config struct {
	// Schema is the PostgreSQL schema of the table. Default: "" (the
	// connection's search_path). Must be empty on other dialects.
	Schema string
	// Table is the inbox table, validated as an SQL identifier. Required.
	// Create it with package txboxmigrate (txboxmigrate.Config.InboxTables).
	Table string
	// Retention is how long a processed message's receipt is kept, counted
	// from its receipt: within it a redelivery is a duplicate, after it
	// Sweep may delete the row and a replay runs the handler again. Rows
	// never processed are kept twice as long. It must exceed the longest
	// time a broker may redeliver a message. Default: DefaultRetention (30
	// days).
	Retention time.Duration
	// MaxMetadataBytes caps the JSON encoding of a message's metadata.
	// Default: DefaultMaxMetadataBytes (64 KiB).
	MaxMetadataBytes int
	// MaxIDLen caps a message id, in characters. Default: DefaultMaxIDLen
	// (256).
	MaxIDLen int
	// MaxSourceLen caps a source, in characters. Default:
	// DefaultMaxSourceLen (256).
	MaxSourceLen int
	// SweepBatchSize is how many rows one DELETE of Sweep removes at most.
	// Default: DefaultSweepBatchSize (1000).
	SweepBatchSize int
	// Hook receives the audit events (received, duplicate, handled, handle
	// failed, swept). Default: LogHook(Logger). To turn auditing off, pass
	// a Hook that does nothing.
	Hook Hook
	// Logger is what the default Hook logs to. Default: slog.Default().
	Logger *slog.Logger
}

// Result says what Handle did with a message.
type Result int

// The results of Handle.
const (
	// Failed is returned with every error: nothing was committed.
	Failed Result = iota
	// Fresh: the message was new; the handler ran and its transaction,
	// with the receipt, committed.
	Fresh
	// Duplicate: the message had been received before; the handler did
	// not run.
	Duplicate
)

func (r Result) String() string {
	switch r {
	case Fresh:
		return "fresh"
	case Duplicate:
		return "duplicate"
	}
	return "failed"
}

// SourceStats counts the receipts of one source.
type SourceStats struct {
	Source    string
	Total     int64 // Processed + Pending
	Processed int64
	Pending   int64 // received, not (yet) marked processed
}

// Inbox deduplicates the messages a service receives, by (source, message
// id), in the transaction that applies their effects. TTx is the caller's
// transaction type (pgx.Tx with txboxpgx, *sql.Tx with txboxsql). An Inbox is
// safe for concurrent use.
type Inbox[TTx any] struct {
	drv       txboxdriver.Driver[TTx]
	sql       inboxsql.Dialect
	table     string
	retention time.Duration
	maxMeta   int
	maxID     int
	maxSource int
	batch     int
	hook      Hook
}

// New returns an Inbox on the table cfg names, through drv. The table must
// exist (see package txboxmigrate); New does not touch the database.
func New[TTx any](drv txboxdriver.Driver[TTx], cfg Config) (*Inbox[TTx], error) {
	d := drv.Dialect()
	if cfg.Table == "" {
		return nil, fmt.Errorf("%w: inbox: Table is required", ErrInvalidConfig)
	}
	if err := sqlname.Validate("inbox table", cfg.Table); err != nil {
		return nil, fmt.Errorf("%w: inbox: %w", ErrInvalidConfig, err)
	}
	if cfg.Schema != "" {
		if d != txboxdriver.Postgres {
			return nil, fmt.Errorf("%w: inbox: a schema is only supported on PostgreSQL, not %s", ErrInvalidConfig, d)
		}
		if err := sqlname.Validate("schema", cfg.Schema); err != nil {
			return nil, fmt.Errorf("%w: inbox: %w", ErrInvalidConfig, err)
		}
	}
	for name, v := range map[string]int64{
		"Retention": int64(cfg.Retention), "MaxMetadataBytes": int64(cfg.MaxMetadataBytes),
		"MaxIDLen": int64(cfg.MaxIDLen), "MaxSourceLen": int64(cfg.MaxSourceLen),
		"SweepBatchSize": int64(cfg.SweepBatchSize),
	} {
		if v < 0 {
			return nil, fmt.Errorf("%w: inbox: %s is negative", ErrInvalidConfig, name)
		}
	}
	sql, err := inboxsql.New(d, cfg.Schema, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("%w: inbox: %w", ErrInvalidConfig, err)
	}
	hook := cfg.Hook
	if hook == nil {
		l := cfg.Logger
		if l == nil {
			l = slog.Default()
		}
		hook = LogHook(l)
	}
	return &Inbox[TTx]{
		drv:       drv,
		sql:       sql,
		table:     cfg.Table,
		retention: orDefault(cfg.Retention, DefaultRetention),
		maxMeta:   orDefault(cfg.MaxMetadataBytes, DefaultMaxMetadataBytes),
		maxID:     orDefault(cfg.MaxIDLen, DefaultMaxIDLen),
		maxSource: orDefault(cfg.MaxSourceLen, DefaultMaxSourceLen),
		batch:     orDefault(cfg.SweepBatchSize, DefaultSweepBatchSize),
		hook:      hook,
	}, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Table returns the inbox table's name (unquoted, without schema).
func (ib *Inbox[TTx]) Table() string { return ib.table }

// Retention returns the configured retention of processed receipts.
func (ib *Inbox[TTx]) Retention() time.Duration { return ib.retention }

// Handle handles one received message exactly once. It begins a
// transaction, records the receipt of (source, id) in it, and, if the message
// is fresh, runs fn with the transaction and commits. fn's database writes
// — business rows, and outbox messages added with txbox.Outbox.Add on the
// same tx — commit together with the receipt, or not at all.
//
// A duplicate returns (Duplicate, nil) without running fn. Two concurrent
// Handle calls for the same message never both run fn: on PostgreSQL the
// second waits on the first's uncommitted receipt, then reports a duplicate,
// or runs fn if the first rolled back (MySQL alike); on SQLite writers are
// serialised.
//
// If fn returns an error, Handle rolls back everything, the receipt
// included, so that a redelivery runs fn again, and returns the error in a
// *HandlerError. A panic in fn rolls back and propagates. fn must not commit
// or roll back tx. Effects of fn outside the database (HTTP calls, e-mail)
// are not covered: they happen at least once, once per attempt.
//
// metadata (nil, or any value encoding/json accepts; json.RawMessage for
// text already encoded) is stored with the receipt. Invalid input returns
// an *InputError before anything is written.
func (ib *Inbox[TTx]) Handle(ctx context.Context, source, id string, metadata any, fn func(ctx context.Context, tx TTx) error) (Result, error) {
	if fn == nil {
		return Failed, errors.New("txbox/inbox: Handle needs a handler")
	}
	meta, err := ib.check(source, id, metadata)
	if err != nil {
		return Failed, err
	}
	start := time.Now()
	tx, dtx, err := ib.drv.BeginTx(ctx)
	if err != nil {
		return Failed, fmt.Errorf("txbox/inbox: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = dtx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	fresh, err := ib.receive(ctx, dtx, inboxsql.Receipt{Source: source, ID: id, Metadata: meta, Now: start, Processed: true})
	if err != nil {
		return Failed, err
	}
	if !fresh {
		done = true
		_ = dtx.Rollback(context.WithoutCancel(ctx))
		ib.hook(ctx, Event{Kind: EventDuplicate, Table: ib.table, Source: source, MessageID: id})
		return Duplicate, nil
	}
	ib.hook(ctx, Event{Kind: EventReceived, Table: ib.table, Source: source, MessageID: id})
	if err := fn(ctx, tx); err != nil {
		done = true
		rerr := dtx.Rollback(context.WithoutCancel(ctx))
		herr := &HandlerError{Source: source, MessageID: id, Err: err, Rollback: rerr}
		ib.hook(ctx, Event{Kind: EventHandleFailed, Table: ib.table, Source: source, MessageID: id, Err: herr, Duration: time.Since(start)})
		return Failed, herr
	}
	done = true
	if err := dtx.Commit(ctx); err != nil {
		err = fmt.Errorf("txbox/inbox: commit: %w", err)
		ib.hook(ctx, Event{Kind: EventHandleFailed, Table: ib.table, Source: source, MessageID: id, Err: err, Duration: time.Since(start)})
		return Failed, err
	}
	ib.hook(ctx, Event{Kind: EventHandled, Table: ib.table, Source: source, MessageID: id, Duration: time.Since(start)})
	return Fresh, nil
}

// RecordReceive records the receipt of (source, id) in tx, the caller's
// transaction, and reports whether the message is fresh. It is Handle's
// first step, for callers that manage the transaction themselves: run the
// message's effects in tx only when fresh is true, call MarkProcessed, and
// commit. Rolling tx back forgets the receipt. Receipts committed without
// MarkProcessed count as pending in Stats and are kept twice the retention.
//
// In one transaction, a second RecordReceive of the same message reports a
// duplicate. Invalid input returns an *InputError and writes nothing.
func (ib *Inbox[TTx]) RecordReceive(ctx context.Context, tx TTx, source, id string, metadata any) (fresh bool, err error) {
	meta, err := ib.check(source, id, metadata)
	if err != nil {
		return false, err
	}
	fresh, err = ib.receive(ctx, ib.drv.UnwrapTx(tx), inboxsql.Receipt{Source: source, ID: id, Metadata: meta, Now: time.Now()})
	if err != nil {
		return false, err
	}
	kind := EventDuplicate
	if fresh {
		kind = EventReceived
	}
	ib.hook(ctx, Event{Kind: kind, Table: ib.table, Source: source, MessageID: id})
	return fresh, nil
}

// MarkProcessed marks the receipt of (source, id) processed, in tx. Marking
// a processed message again changes nothing. It returns ErrNotReceived if tx
// sees no receipt of the message.
func (ib *Inbox[TTx]) MarkProcessed(ctx context.Context, tx TTx, source, id string) error {
	if err := ib.checkKeys(source, id); err != nil {
		return err
	}
	found, err := ib.sql.MarkProcessed(ctx, ib.drv.UnwrapTx(tx), source, id, time.Now())
	if err != nil {
		return fmt.Errorf("txbox/inbox: mark processed: %w", err)
	}
	if !found {
		return fmt.Errorf("%w: %s message %q", ErrNotReceived, source, id)
	}
	return nil
}

// IsFresh reports whether no receipt of (source, id) is committed. It is a
// read outside any transaction, for diagnostics: the answer may be stale at
// once, so never decide to run a handler on it — that is what Handle and
// RecordReceive are for.
func (ib *Inbox[TTx]) IsFresh(ctx context.Context, source, id string) (bool, error) {
	if err := ib.checkKeys(source, id); err != nil {
		return false, err
	}
	found, err := ib.sql.Exists(ctx, ib.drv.Pool(), source, id)
	if err != nil {
		return false, fmt.Errorf("txbox/inbox: is fresh: %w", err)
	}
	return !found, nil
}

// Stats counts the receipts of each source, ordered by source. It scans the
// whole table.
func (ib *Inbox[TTx]) Stats(ctx context.Context) ([]SourceStats, error) {
	rows, err := ib.sql.Stats(ctx, ib.drv.Pool())
	if err != nil {
		return nil, fmt.Errorf("txbox/inbox: stats: %w", err)
	}
	defer rows.Close()
	var out []SourceStats
	for rows.Next() {
		var s SourceStats
		if err := rows.Scan(&s.Source, &s.Total, &s.Processed); err != nil {
			return nil, fmt.Errorf("txbox/inbox: stats: %w", err)
		}
		s.Pending = s.Total - s.Processed
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("txbox/inbox: stats: %w", err)
	}
	return out, nil
}

// Sweep deletes the receipts past retention: processed ones received more
// than Retention ago, unprocessed ones received more than twice Retention
// ago. It deletes in batches of SweepBatchSize rows, each its own statement,
// so it never holds many locks for long, and returns how many rows it
// deleted (also when it stops early on an error or a cancelled ctx). Run it
// periodically, from one process or several. It is SweepWith with no
// options.
func (ib *Inbox[TTx]) Sweep(ctx context.Context) (int64, error) {
	return ib.SweepWith(ctx, SweepOptions{})
}

// SweepOptions narrow a sweep; the zero value is Sweep's.
type SweepOptions struct {
	// Source, when set, sweeps the receipts of this source only.
	Source string
	// Retention replaces the Inbox's Retention for this sweep (0: the
	// Inbox's). Negative is an error.
	Retention time.Duration
	// DryRun counts the receipts the sweep would delete and deletes none
	// (nor reports an EventSwept).
	DryRun bool
	// Progress, when set, is called after each batch that deleted
	// receipts, with the number deleted so far: a long sweep's progress.
	Progress func(deleted int64)
	// BatchSize replaces the Inbox's SweepBatchSize for this sweep (0: the
	// Inbox's). Negative is an error.
	BatchSize int
}

// SweepWith is Sweep with options: it returns how many receipts it deleted,
// or with DryRun how many it would delete.
func (ib *Inbox[TTx]) SweepWith(ctx context.Context, o SweepOptions) (int64, error) {
	if o.Retention < 0 {
		return 0, fmt.Errorf("%w: inbox: sweep: Retention %s is negative", ErrInvalidConfig, o.Retention)
	}
	if o.BatchSize < 0 {
		return 0, fmt.Errorf("%w: inbox: sweep: BatchSize %d is negative", ErrInvalidConfig, o.BatchSize)
	}
	batch := cmp.Or(o.BatchSize, ib.batch)
	if o.Source != "" {
		if err := checkKey("source", o.Source, ib.maxSource); err != nil {
			return 0, err
		}
	}
	retention := orDefault(o.Retention, ib.retention)
	start := time.Now()
	if o.DryRun {
		n, err := ib.sql.SweepCount(ctx, ib.drv.Pool(), o.Source, start, retention)
		if err != nil {
			return 0, fmt.Errorf("txbox/inbox: sweep (dry run): %w", err)
		}
		return n, nil
	}
	var total int64
	var err error
	for {
		if err = ctx.Err(); err != nil {
			break
		}
		var n int64
		n, err = ib.sql.Sweep(ctx, ib.drv.Pool(), o.Source, start, retention, batch)
		total += n
		if n > 0 && o.Progress != nil {
			o.Progress(total)
		}
		if err != nil || n < int64(batch) {
			break
		}
	}
	if err != nil {
		err = fmt.Errorf("txbox/inbox: sweep: %w", err)
	}
	ib.hook(ctx, Event{Kind: EventSwept, Table: ib.table, Source: o.Source, Deleted: total, Err: err, Duration: time.Since(start)})
	return total, err
}

func (ib *Inbox[TTx]) checkKeys(source, id string) error {
	if err := checkKey("source", source, ib.maxSource); err != nil {
		return err
	}
	return checkKey("message id", id, ib.maxID)
}

func (ib *Inbox[TTx]) check(source, id string, metadata any) (any, error) {
	if err := ib.checkKeys(source, id); err != nil {
		return nil, err
	}
	return encodeMetadata(metadata, ib.maxMeta)
}

// receive runs the insert-first receipt and reports whether it inserted a
// row.
func (ib *Inbox[TTx]) receive(ctx context.Context, ex txboxdriver.Executor, r inboxsql.Receipt) (bool, error) {
	fresh, err := ib.sql.Receive(ctx, ex, r)
	if err != nil {
		return false, fmt.Errorf("txbox/inbox: record receipt: %w", err)
	}
	return fresh, nil
}
