package inbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/sqlname"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

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
	// Create it with package migrate (migrate.Config.InboxTables).
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
	drv       driver.Driver[TTx]
	dialect   driver.Dialect
	table     string
	q         map[string]string
	retention time.Duration
	maxMeta   int
	maxID     int
	maxSource int
	batch     int
	hook      Hook
}

// New returns an Inbox on the table cfg names, through drv. The table must
// exist (see package migrate); New does not touch the database.
func New[TTx any](drv driver.Driver[TTx], cfg Config) (*Inbox[TTx], error) {
	d := drv.Dialect()
	if cfg.Table == "" {
		return nil, fmt.Errorf("%w: inbox: Table is required", ErrInvalidConfig)
	}
	if err := sqlname.Validate("inbox table", cfg.Table); err != nil {
		return nil, fmt.Errorf("%w: inbox: %w", ErrInvalidConfig, err)
	}
	if cfg.Schema != "" {
		if d != driver.Postgres {
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
	text, err := sqlFiles.ReadFile("sql/" + string(d) + ".sql")
	if err != nil {
		return nil, fmt.Errorf("%w: inbox: dialect %q is not supported", ErrInvalidConfig, d)
	}
	qualified := sqlname.Qualified(d, cfg.Schema, cfg.Table)
	q := outboxsql.ParseNamed(string(text))
	for name, s := range q {
		q[name] = strings.ReplaceAll(s, "{{table}}", qualified)
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
		dialect:   d,
		table:     cfg.Table,
		q:         q,
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
	fresh, err := ib.receive(ctx, dtx, "receive_processed", source, id, meta, start)
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
		_ = dtx.Rollback(context.WithoutCancel(ctx))
		herr := &HandlerError{Source: source, MessageID: id, Err: err}
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
	fresh, err = ib.receive(ctx, ib.drv.UnwrapTx(tx), "receive", source, id, meta, time.Now())
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
	args := []any{source, id}
	if ib.dialect == driver.SQLite {
		args = append(args, time.Now().UnixMicro())
	}
	n, err := ib.drv.UnwrapTx(tx).Exec(ctx, ib.q["mark_processed"], args...)
	if err != nil {
		return fmt.Errorf("txbox/inbox: mark processed: %w", err)
	}
	if n == 0 && ib.dialect == driver.MySQL {
		// MySQL counts a row already processed as unaffected (unless
		// CLIENT_FOUND_ROWS is set): ask whether the receipt exists.
		rows, err := ib.drv.UnwrapTx(tx).Query(ctx, ib.q["found_receipt"], source, id)
		if err != nil {
			return fmt.Errorf("txbox/inbox: mark processed: %w", err)
		}
		found, err := exists(rows)
		if err != nil {
			return fmt.Errorf("txbox/inbox: mark processed: %w", err)
		}
		if found {
			n = 1
		}
	}
	if n == 0 {
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
	rows, err := ib.drv.Pool().Query(ctx, ib.q["exists"], source, id)
	if err != nil {
		return false, fmt.Errorf("txbox/inbox: is fresh: %w", err)
	}
	found, err := exists(rows)
	if err != nil {
		return false, fmt.Errorf("txbox/inbox: is fresh: %w", err)
	}
	return !found, nil
}

// Stats counts the receipts of each source, ordered by source. It scans the
// whole table.
func (ib *Inbox[TTx]) Stats(ctx context.Context) ([]SourceStats, error) {
	rows, err := ib.drv.Pool().Query(ctx, ib.q["stats"])
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
// periodically, from one process or several.
func (ib *Inbox[TTx]) Sweep(ctx context.Context) (int64, error) {
	start := time.Now()
	var processedCutoff, pendingCutoff any = start.Add(-ib.retention), start.Add(-2 * ib.retention)
	switch ib.dialect {
	case driver.SQLite:
		processedCutoff, pendingCutoff = start.Add(-ib.retention).UnixMicro(), start.Add(-2*ib.retention).UnixMicro()
	case driver.MySQL: // ages, counted back from the server's UTC clock
		processedCutoff, pendingCutoff = ib.retention.Microseconds(), 2*ib.retention.Microseconds()
	}
	var total int64
	var err error
	for {
		if err = ctx.Err(); err != nil {
			break
		}
		var n int64
		n, err = ib.drv.Pool().Exec(ctx, ib.q["sweep"], processedCutoff, pendingCutoff, ib.batch)
		total += n
		if err != nil || n < int64(ib.batch) {
			break
		}
	}
	if err != nil {
		err = fmt.Errorf("txbox/inbox: sweep: %w", err)
	}
	ib.hook(ctx, Event{Kind: EventSwept, Table: ib.table, Deleted: total, Err: err, Duration: time.Since(start)})
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

// receive runs the insert-first receipt query and reports whether it
// inserted a row.
func (ib *Inbox[TTx]) receive(ctx context.Context, ex driver.Executor, query, source, id string, meta any, now time.Time) (bool, error) {
	args := []any{source, id, meta}
	if ib.dialect == driver.SQLite {
		args = []any{source, id, now.UnixMicro(), meta}
	}
	if ib.dialect == driver.MySQL {
		return receiveMySQL(ctx, ex, ib.q[query], args)
	}
	rows, err := ex.Query(ctx, ib.q[query], args...)
	if err != nil {
		return false, fmt.Errorf("txbox/inbox: record receipt: %w", err)
	}
	found, err := exists(rows)
	if err != nil {
		return false, fmt.Errorf("txbox/inbox: record receipt: %w", err)
	}
	return found, nil
}

// receiveMySQL runs the receipt's INSERT … ON DUPLICATE KEY UPDATE, whose
// duplicate path always changes the row: 1 row affected means inserted
// (fresh), 2 means updated (duplicate), whatever CLIENT_FOUND_ROWS says.
// Any other count (0: a driver that does not report it) is an error, never
// a guess that could skip a handler or run it twice.
func receiveMySQL(ctx context.Context, ex driver.Executor, query string, args []any) (bool, error) {
	n, err := ex.Exec(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("txbox/inbox: record receipt: %w", err)
	}
	switch n {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	return false, fmt.Errorf("txbox/inbox: record receipt: the driver reported %d rows affected, want 1 (fresh) or 2 (duplicate)", n)
}

// exists reports whether rows has a row, and closes rows. It reads the
// error after Close, where pgx reports a statement's late failures.
func exists(rows driver.Rows) (bool, error) {
	found := rows.Next()
	cerr := rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	return found, cerr
}
