// Package dlq is the seam between txbox's tools (the txbox dlq command,
// the dashboard) and the dead letters a consumer leaves on its broker: a
// Store lists, shows, redrives and discards the dead letters of one
// binding. Each broker package of txbox has one (natsjs.DeadLetters,
// txboxrabbitmq.DeadLetters, redisstream.DeadLetters).
//
// A redrive sends the message back to the binding it was dead-lettered
// from with its original message id, so that an inbox handler that did
// handle it meanwhile drops it as a duplicate, then removes the dead
// letter.
package dlq

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/txbox/txbox"
)

// ErrNotFound is returned by Store.Get for a ref that names no dead letter
// of the binding.
var ErrNotFound = errors.New("dlq: no such dead letter")

// Letter is one dead letter.
type Letter struct {
	// Ref names the dead letter in its store (a stream sequence, an entry
	// id, a message id): what Get, Redrive and Discard take. Refs of one
	// binding sort in the order List returns them on brokers that have
	// an order of their own (JetStream, Redis).
	Ref string
	// Binding is the binding it was dead-lettered from.
	Binding string
	// Message is the message as it was delivered: ID its original id,
	// Topic the subject, stream or queue it came from; Headers hold the
	// message's own headers, without those the broker adapter added to
	// the dead letter.
	txbox.Message
	// Deliveries counts its deliveries to the binding, the last one
	// included.
	Deliveries int
	// Error is why the consumer gave up on it: the handler's last error.
	Error string
	// DeadAt is when it was dead-lettered; zero where the broker does not
	// say.
	DeadAt time.Time
}

// Filter chooses dead letters; a zero field matches every letter.
type Filter struct {
	Topic string    // the topic (subject, stream, queue) it came from, exactly
	Key   string    // its ordering key, exactly
	Error string    // a substring of its error
	Since time.Time // dead-lettered at or after (letters without a time do not match)
	IDs   []string  // its message id is one of these
}

// Match reports whether l passes f.
func (f Filter) Match(l Letter) bool {
	if f.Topic != "" && l.Topic != f.Topic {
		return false
	}
	if f.Key != "" && l.Key != f.Key {
		return false
	}
	if f.Error != "" && !strings.Contains(l.Error, f.Error) {
		return false
	}
	if !f.Since.IsZero() && (l.DeadAt.IsZero() || l.DeadAt.Before(f.Since)) {
		return false
	}
	if len(f.IDs) > 0 {
		found := false
		for _, id := range f.IDs {
			if id == l.ID {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Query is one page of a listing.
type Query struct {
	Filter
	// After starts the page after this ref (the last Ref of the page
	// before); "" starts at the first dead letter.
	After string
	// Limit bounds the page; at least 1.
	Limit int
}

// Page is what List returns.
type Page struct {
	Letters []Letter
	// More is true when the page was cut at Query.Limit: more letters
	// match after its last one.
	More bool
}

// Result is what Redrive and Discard did.
type Result struct {
	Done   []string // refs redriven or discarded
	Missed []string // refs that name no dead letter of the binding (gone meanwhile)
}

// Store is the dead letters of a broker's bindings.
type Store interface {
	// List returns the binding's dead letters that match q, oldest first.
	List(ctx context.Context, binding string, q Query) (Page, error)
	// Get returns one dead letter, or an error wrapping ErrNotFound.
	Get(ctx context.Context, binding, ref string) (Letter, error)
	// Redrive sends each dead letter back to the binding with its
	// original message id, then removes it; an error stops it with the
	// refs done so far in the Result.
	Redrive(ctx context.Context, binding string, refs []string) (Result, error)
	// Discard removes the dead letters.
	Discard(ctx context.Context, binding string, refs []string) (Result, error)
}

// All lists every dead letter of the binding that matches f, page by page
// (for a bulk redrive or discard by filter).
func All(ctx context.Context, s Store, binding string, f Filter) ([]Letter, error) {
	var out []Letter
	q := Query{Filter: f, Limit: 500}
	for {
		p, err := s.List(ctx, binding, q)
		if err != nil {
			return out, err
		}
		out = append(out, p.Letters...)
		if !p.More || len(p.Letters) == 0 {
			return out, nil
		}
		q.After = p.Letters[len(p.Letters)-1].Ref
	}
}

// Refs returns the letters' refs.
func Refs(ls []Letter) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Ref
	}
	return out
}
