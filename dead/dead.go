// Package dead lists, redrives and discards dead outbox messages: those the
// broker rejected MaxAttempts times. A dead message of key K parks every
// later message of K (per-key order is never broken); other keys flow.
// Redrive gives the message a fresh attempt budget, and K resumes in order
// behind it; Discard deletes it, and K resumes with the next message.
// `txbox dead list|redrive|discard` is the same from the command line.
package dead

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/outboxtable"
	"github.com/txbox/txbox/internal/printable"
	"github.com/txbox/txbox/txboxdriver"
)

// Message is a dead outbox message.
type Message struct {
	Seq       int64  // the row's id: what Redrive and Discard take
	ID        string // the message id
	Topic     string
	Key       string
	Attempts  int
	LastError string // the broker's last rejection
	CreatedAt time.Time
	DeadAt    time.Time
	Parked    int64 // later messages of Key waiting behind this one
	// Bytes, from Brief, are the full lengths in bytes of ID, Topic, Key
	// and LastError, which Brief may have cut; zero from List and Get.
	Bytes Bytes
}

// Bytes are the full lengths in bytes of a dead message's text values.
type Bytes struct{ ID, Topic, Key, LastError int64 }

// BriefChars is how many characters Brief reads of each text value.
const BriefChars = outboxsql.BriefChars

// Letter is a dead message whole, as Get returns it.
type Letter struct {
	Message
	Payload []byte
	Headers string // a JSON object, as stored
}

// ErrNotFound: no dead message has the seq asked for.
var ErrNotFound = errors.New("txbox/dead: no dead message with this seq")

// Letters operates on the dead messages of one outbox table.
type Letters struct {
	store *outboxsql.Store
	find  *outboxsql.Finder
}

// New returns Letters for the outbox table cfg names (Schema, Table), or,
// when drv is a *txbox.Outbox and cfg names none, for that outbox's table.
func New[TTx any](drv txboxdriver.Driver[TTx], cfg txbox.Config) (*Letters, error) {
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
	return &Letters{store: store, find: find}, nil
}

// Filter selects dead messages for Find and Seqs; the zero value selects
// every one.
type Filter struct {
	Topic string    // of this topic, exactly
	Key   string    // of this ordering key, exactly
	Error string    // whose last error contains this text (MySQL: as its collation compares)
	Since time.Time // dead at or after
	After int64     // with a seq above this: the last seq of the page before
	Limit int       // Find: at most this many (at least 1)
}

func (f Filter) find() outboxsql.Find {
	return outboxsql.Find{After: f.After, Topic: f.Topic, Key: f.Key, Error: f.Error, Since: f.Since, Limit: f.Limit}
}

// Find returns up to f.Limit dead messages that f selects, oldest first,
// and whether more match after them (the next page: After = the last
// Seq).
func (l *Letters) Find(ctx context.Context, f Filter) ([]Message, bool, error) {
	rows, more, err := l.find.Dead(ctx, f.find())
	if err != nil {
		return nil, false, err
	}
	return messages(rows), more, nil
}

// All returns every dead message that f selects (f.Limit
// aside), oldest first: what a filtered Redrive or Discard takes.
func (l *Letters) All(ctx context.Context, f Filter) ([]Message, error) {
	var out []Message
	f.Limit = 1000
	for {
		page, more, err := l.Find(ctx, f)
		out = append(out, page...)
		if err != nil || !more || len(page) == 0 {
			return out, err
		}
		f.After = page[len(page)-1].Seq
	}
}

// List returns up to limit dead messages, oldest first.
func (l *Letters) List(ctx context.Context, limit int) ([]Message, error) {
	rows, err := l.store.ListDead(ctx, limit)
	if err != nil {
		return nil, err
	}
	return messages(rows), nil
}

// Brief is List with ID, Topic, Key and LastError cut in the database to
// their first BriefChars characters, and their full lengths in Bytes:
// what a page or a table of many messages reads, so that long values (a
// megabyte of error) cost at most BriefChars characters each.
func (l *Letters) Brief(ctx context.Context, limit int) ([]Message, error) {
	rows, err := l.store.ListDeadBrief(ctx, limit)
	if err != nil {
		return nil, err
	}
	return messages(rows), nil
}

func messages(rows []outboxsql.DeadRow) []Message {
	out := make([]Message, len(rows))
	for i, r := range rows {
		out[i] = Message{Seq: r.Seq, ID: r.ID, Topic: r.Topic, Key: r.Key, Attempts: r.Attempts, LastError: r.LastError,
			CreatedAt: r.CreatedAt, DeadAt: r.DeadAt, Parked: r.Parked, Bytes: Bytes(r.Bytes)}
	}
	return out
}

// Get returns the dead message seq whole, payload and headers included
// (Parked is not counted), or an error wrapping ErrNotFound.
func (l *Letters) Get(ctx context.Context, seq int64) (Letter, error) {
	rows, err := l.store.Pending(ctx, outboxsql.PendingFilter{Seq: seq, Dead: true, Limit: 1})
	if err != nil {
		return Letter{}, err
	}
	if len(rows) == 0 || rows[0].DeadAt.IsZero() {
		return Letter{}, fmt.Errorf("%w: %d", ErrNotFound, seq)
	}
	r := rows[0]
	return Letter{
		Message: Message{Seq: r.Seq, ID: r.ID, Topic: r.Topic, Key: r.Key, Attempts: r.Attempts, LastError: r.LastError, CreatedAt: r.CreatedAt, DeadAt: r.DeadAt},
		Payload: r.Payload, Headers: r.Headers,
	}, nil
}

// Redrive makes the dead messages with these seqs (all, when none are given)
// pending again with a fresh attempt budget, and returns how many it changed.
// Each row is redriven or refused on its own: a row the table's checks
// refuse as a pending message (a dead row parked as invalid by the
// contract migration, say) stays dead, and the others are redriven; the
// error is then a *RefusedError naming each refused row.
func (l *Letters) Redrive(ctx context.Context, seqs ...int64) (int64, error) {
	n, refused, err := l.store.Redrive(ctx, seqs)
	return n, refusedError("redrive", refused, err)
}

// Discard deletes the dead messages with these seqs (all, when none are
// given), releasing the keys they parked, and returns how many it deleted.
// As with Redrive, a row the database refuses to delete (a foreign key, a
// trigger) is refused on its own, and the error is a *RefusedError.
func (l *Letters) Discard(ctx context.Context, seqs ...int64) (int64, error) {
	n, refused, err := l.store.Discard(ctx, seqs)
	return n, refusedError("discard", refused, err)
}

// Refused is a dead message that Redrive or Discard left as it was.
type Refused struct {
	Seq    int64
	Reason string // the database's error, as it sent it (escape it to print it)
}

// RefusedError is the error of Redrive and Discard when the database
// refused some rows; the count they return is of the rows done.
type RefusedError struct {
	Action string // "redrive" or "discard"
	Rows   []Refused
	// Err is the error that stopped the action before it tried every row
	// (the connection was lost, say), or nil.
	Err error
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("the database refused to %s %d dead message(s), first seq %d: %s",
		e.Action, len(e.Rows), e.Rows[0].Seq, printable.Cell(e.Rows[0].Reason))
	if e.Err != nil {
		msg += "; then stopped: " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Err.
func (e *RefusedError) Unwrap() error { return e.Err }

// refusedError returns err when no row was refused, else a *RefusedError.
func refusedError(action string, refused []outboxsql.Refusal, err error) error {
	if len(refused) == 0 {
		return err
	}
	e := &RefusedError{Action: action, Rows: make([]Refused, len(refused)), Err: err}
	for i, r := range refused {
		e.Rows[i] = Refused{Seq: r.Seq, Reason: r.Err.Error()}
	}
	return e
}
