package txboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/txboxdriver"
)

// RequireAddedOpts says what an added message must be. Every field that is
// set must match (they are AND-ed); a zero field is not checked.
type RequireAddedOpts struct {
	// ID is the message id ("" is not checked).
	ID string
	// Topic is the topic ("" is not checked).
	Topic string
	// Key is the ordering key ("" is not checked: an unkeyed message cannot
	// be required as such).
	Key string
	// Payload is compared byte for byte (nil is not checked; an empty,
	// non-nil slice requires an empty payload).
	Payload []byte
	// Headers must each be present with these values; the message may
	// have others (nil is not checked).
	Headers map[string]string
}

func (o *RequireAddedOpts) matches(r *txbox.Record) bool {
	if o == nil {
		return true
	}
	if (o.ID != "" && o.ID != r.ID) || (o.Topic != "" && o.Topic != r.Topic) || (o.Key != "" && o.Key != r.Key) {
		return false
	}
	if o.Payload != nil && !bytes.Equal(o.Payload, r.Payload) {
		return false
	}
	for k, v := range o.Headers {
		if got, ok := r.Headers[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (o *RequireAddedOpts) String() string {
	if o == nil {
		return "any message"
	}
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, name+"="+v)
		}
	}
	add("id", o.ID)
	add("topic", o.Topic)
	add("key", o.Key)
	if o.Payload != nil {
		parts = append(parts, fmt.Sprintf("payload=%.80q", o.Payload))
	}
	if o.Headers != nil {
		parts = append(parts, fmt.Sprintf("headers⊇%v", o.Headers))
	}
	if len(parts) == 0 {
		return "any message"
	}
	return strings.Join(parts, " ")
}

// RequireAdded requires that exactly one undelivered message of ob's
// outbox, committed, matches opts, and returns it (Attempts is zero). It
// fails tb, saying how many matched and listing every undelivered message,
// when none or several do.
func RequireAdded[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], opts *RequireAddedOpts) *txbox.Record {
	tb.Helper()
	return requireAdded(ctx, tb, ob, ob.Pool(), opts)
}

// RequireAddedTx is RequireAdded on what tx sees: the messages it added
// and has not committed yet among them.
func RequireAddedTx[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], tx TTx, opts *RequireAddedOpts) *txbox.Record {
	tb.Helper()
	return requireAdded(ctx, tb, ob, ob.UnwrapTx(tx), opts)
}

// RequireNotAdded requires that no undelivered, committed message of ob's
// outbox matches every field set in opts (nil: that there is none at all).
func RequireNotAdded[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], opts *RequireAddedOpts) {
	tb.Helper()
	requireNotAdded(ctx, tb, ob, ob.Pool(), opts)
}

// RequireNotAddedTx is RequireNotAdded on what tx sees.
func RequireNotAddedTx[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], tx TTx, opts *RequireAddedOpts) {
	tb.Helper()
	requireNotAdded(ctx, tb, ob, ob.UnwrapTx(tx), opts)
}

// RequireManyAdded requires that the undelivered, committed messages of
// ob's outbox are exactly expected: as many, and the i-th row matching
// expected[i]. Rows are in table order, the order the relay delivers in;
// Add writes one call's messages sorted by key (stably, so each key keeps
// the caller's order), which puts an unkeyed message before keyed ones.
func RequireManyAdded[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], expected []RequireAddedOpts) []*txbox.Record {
	tb.Helper()
	return requireMany(ctx, tb, ob, ob.Pool(), expected)
}

// RequireManyAddedTx is RequireManyAdded on what tx sees.
func RequireManyAddedTx[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], tx TTx, expected []RequireAddedOpts) []*txbox.Record {
	tb.Helper()
	return requireMany(ctx, tb, ob, ob.UnwrapTx(tx), expected)
}

// added reads the undelivered rows of ob's table through ex.
func added[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], ex txboxdriver.Executor) ([]*txbox.Record, bool) {
	tb.Helper()
	schema, name := ob.OutboxTable()
	table, err := txbox.Config{Schema: schema, Table: name}.TableName(ob.Dialect())
	if err != nil {
		fail(tb, "outbox table: %v", err)
		return nil, false
	}
	rows, err := outboxsql.ListPending(ctx, ob.Dialect(), ex, table)
	if err != nil {
		fail(tb, "read the outbox %s: %v", table, err)
		return nil, false
	}
	out := make([]*txbox.Record, len(rows))
	for i, r := range rows {
		rec := &txbox.Record{Seq: r.Seq,
			Message: txbox.Message{ID: r.ID, Topic: r.Topic, Key: r.Key, Payload: r.Payload, CreatedAt: r.CreatedAt}}
		if r.Headers != "" && r.Headers != "{}" {
			if err := json.Unmarshal([]byte(r.Headers), &rec.Headers); err != nil {
				fail(tb, "outbox row %d (%s): headers %.80q are not a JSON object of strings: %v", r.Seq, r.ID, r.Headers, err)
				return nil, false
			}
		}
		out[i] = rec
	}
	return out, true
}

// list is the undelivered messages, one per line, for failure messages.
func list(recs []*txbox.Record) string {
	if len(recs) == 0 {
		return "\n  (the outbox has no undelivered message)"
	}
	var b strings.Builder
	for i, r := range recs {
		fmt.Fprintf(&b, "\n  %d: %s", i, describe(r.ID, r.Topic, r.Key, r.Payload, r.Headers))
	}
	return b.String()
}

func requireAdded[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], ex txboxdriver.Executor, opts *RequireAddedOpts) *txbox.Record {
	tb.Helper()
	recs, ok := added(ctx, tb, ob, ex)
	if !ok {
		return nil
	}
	var match []*txbox.Record
	for _, r := range recs {
		if opts.matches(r) {
			match = append(match, r)
		}
	}
	if len(match) != 1 {
		what := "no message"
		if len(match) > 1 {
			what = fmt.Sprintf("%d messages (ambiguous: narrow the options)", len(match))
		}
		fail(tb, "RequireAdded: %s matched %s; the outbox holds %d undelivered:%s", what, opts, len(recs), list(recs))
		return nil
	}
	return match[0]
}

func requireNotAdded[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], ex txboxdriver.Executor, opts *RequireAddedOpts) {
	tb.Helper()
	recs, ok := added(ctx, tb, ob, ex)
	if !ok {
		return
	}
	var match []*txbox.Record
	for _, r := range recs {
		if opts.matches(r) {
			match = append(match, r)
		}
	}
	if len(match) > 0 {
		fail(tb, "RequireNotAdded: %d messages matched %s:%s", len(match), opts, list(match))
	}
}

func requireMany[TTx any](ctx context.Context, tb TB, ob *txbox.Outbox[TTx], ex txboxdriver.Executor, expected []RequireAddedOpts) []*txbox.Record {
	tb.Helper()
	recs, ok := added(ctx, tb, ob, ex)
	if !ok {
		return nil
	}
	if len(recs) != len(expected) {
		fail(tb, "RequireManyAdded: %d messages expected, the outbox holds %d undelivered:%s", len(expected), len(recs), list(recs))
		return nil
	}
	for i := range expected {
		if !expected[i].matches(recs[i]) {
			fail(tb, "RequireManyAdded: message %d does not match %s (rows are in table order; Add sorts one call's messages by key); the outbox holds:%s", i, &expected[i], list(recs))
			return nil
		}
	}
	return recs
}
