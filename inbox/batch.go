package inbox

import (
	"context"
	"time"

	"github.com/txbox/txbox/internal/inboxsql"
)

// Item is one message of a batch (see HandleBatch).
type Item[TTx any] struct {
	Source, ID string
	Metadata   any // as Handle's metadata
	// Fn is the message's handler, as Handle's fn. It must not commit or
	// roll back tx, nor roll back to a savepoint it did not make.
	Fn func(ctx context.Context, tx TTx) error
}

// ItemResult is what HandleBatch did with one item.
type ItemResult struct {
	// Result is Fresh (the handler ran and its effects committed),
	// Duplicate (it did not run) or Failed.
	Result Result
	// Err is why the item failed: an *InputError (nothing was written), a
	// *HandlerError (the handler failed; its effects and its receipt were
	// rolled back, its neighbours' were not), the receipt's error, or the
	// *BatchError that HandleBatch returned.
	Err error
}

// BatchError is a failure of a batch's transaction as a whole (begin, a
// savepoint, the commit, a cancelled ctx): nothing of the batch committed.
// It wraps the database's error only, never a handler's.
type BatchError struct {
	Op  string // "begin", "savepoint", "rollback to savepoint", "commit"
	Err error
}

func (e *BatchError) Error() string { return "txbox/inbox: batch: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the database's error.
func (e *BatchError) Unwrap() error { return e.Err }

// HandleBatch is Handle for several messages in ONE transaction, so that
// they share one commit: it begins a transaction and, for each item in
// order, sets a savepoint, records the item's receipt and, if the message
// is fresh, runs its Fn. A Fn that returns an error rolls back to the
// savepoint — its own effects and its receipt only — and the next item
// goes on; a duplicate's savepoint is rolled back too (it wrote nothing
// that matters). Then HandleBatch commits once.
//
// On PostgreSQL every item that writes is a subtransaction: above 64 in one
// transaction, the server's per-session subtransaction cache overflows and
// other sessions' snapshots get slower, so keep batches there at 64 or
// fewer.
//
// It returns one ItemResult per item, in order. Items of the same message
// (same source and id) within one batch are handled as concurrent copies
// are: the first that succeeds is fresh, later ones are duplicates. Two
// concurrent batches holding the same message never both run it: the
// second waits on the first's uncommitted receipt, as in Handle. Waits
// between batches can end in a deadlock; on PostgreSQL the statement that
// lost is the item's error (a transient one, see driver.IsTransient), on
// MySQL InnoDB rolls the whole transaction back and the batch fails.
//
// If the transaction fails as a whole (begin, a savepoint statement — as
// when a Fn broke the transaction or its connection —, the commit, ctx),
// nothing committed: HandleBatch returns a *BatchError, which is also the
// Err of every item not rejected as invalid input. A panic in a Fn rolls
// back the whole transaction and propagates.
func (ib *Inbox[TTx]) HandleBatch(ctx context.Context, items []Item[TTx]) ([]ItemResult, error) {
	res := make([]ItemResult, len(items))
	metas := make([]any, len(items))
	valid := 0
	for i, it := range items {
		if it.Fn == nil {
			res[i].Err = &InputError{Field: "handler", Reason: ReasonEmpty}
			continue
		}
		meta, err := ib.check(it.Source, it.ID, it.Metadata)
		if err != nil {
			res[i].Err = err
			continue
		}
		metas[i] = meta
		valid++
	}
	if valid == 0 {
		return res, nil
	}
	start := time.Now()
	tx, dtx, err := ib.drv.BeginTx(ctx)
	if err != nil {
		return ib.failBatch(ctx, items, res, nil, start, &BatchError{Op: "begin", Err: err})
	}
	done := false
	defer func() {
		if !done { // a Fn panicked
			_ = dtx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	fresh := make([]bool, len(items))
	doom := func(op string, err error) ([]ItemResult, error) {
		done = true
		_ = dtx.Rollback(context.WithoutCancel(ctx))
		return ib.failBatch(ctx, items, res, fresh, start, &BatchError{Op: op, Err: err})
	}
	for i, it := range items {
		if res[i].Err != nil {
			continue
		}
		if err := ib.sql.Savepoint(ctx, dtx); err != nil {
			return doom("savepoint", err)
		}
		r := inboxsql.Receipt{Source: it.Source, ID: it.ID, Metadata: metas[i], Now: time.Now(), Processed: true}
		ok, err := ib.receive(ctx, dtx, r)
		switch {
		case err != nil:
			res[i].Err = err
		case !ok:
			res[i].Result = Duplicate
			ib.hook(ctx, Event{Kind: EventDuplicate, Table: ib.table, Source: it.Source, MessageID: it.ID})
		default:
			ib.hook(ctx, Event{Kind: EventReceived, Table: ib.table, Source: it.Source, MessageID: it.ID})
			if err := it.Fn(ctx, tx); err != nil {
				herr := &HandlerError{Source: it.Source, MessageID: it.ID, Err: err}
				res[i].Err = herr
				ib.hook(ctx, Event{Kind: EventHandleFailed, Table: ib.table, Source: it.Source, MessageID: it.ID, Err: herr, Duration: time.Since(start)})
			}
		}
		if res[i].Err != nil || res[i].Result == Duplicate {
			if err := ib.sql.RollbackSavepoint(ctx, dtx); err != nil {
				return doom("rollback to savepoint", err)
			}
			continue
		}
		fresh[i] = true
	}
	done = true
	if err := dtx.Commit(ctx); err != nil {
		return ib.failBatch(ctx, items, res, fresh, start, &BatchError{Op: "commit", Err: err})
	}
	for i, it := range items {
		if fresh[i] {
			res[i].Result = Fresh
			ib.hook(ctx, Event{Kind: EventHandled, Table: ib.table, Source: it.Source, MessageID: it.ID, Duration: time.Since(start)})
		}
	}
	return res, nil
}

// failBatch gives every item not rejected as invalid input the batch's
// error, reports the failure of those that had run, and returns it.
func (ib *Inbox[TTx]) failBatch(ctx context.Context, items []Item[TTx], res []ItemResult, ran []bool, start time.Time, err *BatchError) ([]ItemResult, error) {
	for i, it := range items {
		if isInput(res[i].Err) {
			continue
		}
		res[i] = ItemResult{Result: Failed, Err: err}
		if ran != nil && ran[i] {
			ib.hook(ctx, Event{Kind: EventHandleFailed, Table: ib.table, Source: it.Source, MessageID: it.ID, Err: err, Duration: time.Since(start)})
		}
	}
	return res, err
}

func isInput(err error) bool {
	_, ok := err.(*InputError)
	return ok
}
