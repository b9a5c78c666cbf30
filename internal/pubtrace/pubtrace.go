// Package pubtrace carries, in the context of one Publish call, what the
// relay wants to hear of single messages beyond their errors: txbox's
// publishers that count duplicates (txbox.DuplicateCounter) tell it of
// each, so that a relay counts its own messages only, also when one
// publisher serves several relays (a relay.Group).
package pubtrace

import "context"

// Trace is told, by a publisher that can, what the broker said of single
// messages of one Publish call beyond their errors. Its funcs are called
// before Publish returns, possibly from several goroutines.
type Trace struct {
	// Duplicate is called with the index in msgs of a message that the
	// broker acknowledged as one it already held.
	Duplicate func(i int)
}

type key struct{}

// With returns ctx carrying t, for a Publish call.
func With(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, key{}, t)
}

// From returns the Trace of ctx, or nil.
func From(ctx context.Context) *Trace {
	t, _ := ctx.Value(key{}).(*Trace)
	return t
}
