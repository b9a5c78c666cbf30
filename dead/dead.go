// Package dead lists, redrives and discards dead outbox messages: those the
// broker rejected MaxAttempts times. A dead message of key K parks every
// later message of K (per-key order is never broken); other keys flow.
// Redrive gives the message a fresh attempt budget, and K resumes in order
// behind it; Discard deletes it, and K resumes with the next message.
// `txbox dead list|redrive|discard` is the same from the command line.
package dead

import (
	"context"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
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
}

// Letters operates on the dead messages of one outbox table.
type Letters struct {
	store *outboxsql.Store
}

// New returns Letters for the outbox table cfg names (Schema, Table), or,
// when drv is a *txbox.Outbox and cfg names none, for that outbox's table.
func New[TTx any](drv driver.Driver[TTx], cfg txbox.Config) (*Letters, error) {
	var err error
	if cfg.Schema, cfg.Table, err = txbox.TableOf(drv, cfg.Schema, cfg.Table); err != nil {
		return nil, err
	}
	table, err := cfg.TableName(drv.Dialect())
	if err != nil {
		return nil, err
	}
	store, err := outboxsql.NewStore(drv.Dialect(), drv.Pool(), table, time.Minute)
	if err != nil {
		return nil, err
	}
	return &Letters{store: store}, nil
}

// List returns up to limit dead messages, oldest first.
func (l *Letters) List(ctx context.Context, limit int) ([]Message, error) {
	rows, err := l.store.ListDead(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Message, len(rows))
	for i, r := range rows {
		out[i] = Message(r)
	}
	return out, nil
}

// Redrive makes the dead messages with these seqs (all, when none are given)
// pending again with a fresh attempt budget, and returns how many it changed.
func (l *Letters) Redrive(ctx context.Context, seqs ...int64) (int64, error) {
	return l.store.Redrive(ctx, seqs)
}

// Discard deletes the dead messages with these seqs (all, when none are
// given), releasing the keys they parked, and returns how many it deleted.
func (l *Letters) Discard(ctx context.Context, seqs ...int64) (int64, error) {
	return l.store.Discard(ctx, seqs)
}
