package inbox

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/txbox/txbox/internal/addbuf"
	"github.com/txbox/txbox/txboxdriver"

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

// BatchOptions are HandleBatch's options; nil means the defaults.
type BatchOptions struct {
	// DeferAdds defers the INSERTs of the handlers' Outbox.Add calls on the
	// batch's transaction (see internal/addbuf): each Add validates its
	// messages and returns their ids without a round trip, and the rows of
	// the whole batch are inserted together just before the COMMIT (those
	// of a handler that failed are dropped with its savepoint). The cost:
	// a handler does not see its own outbox rows, and an INSERT that fails
	// then fails the whole batch. Default: false.
	DeferAdds bool
}

// BatchError is a failure of a batch's transaction as a whole (begin, a
// savepoint, the commit, a cancelled ctx): nothing of the batch committed.
// It wraps the database's error only, never a handler's.
type BatchError struct {
	Op  string // "begin", "savepoint", "rollback to savepoint", "outbox insert", "commit"
	Err error
}

func (e *BatchError) Error() string { return "txbox/inbox: batch: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the database's error.
func (e *BatchError) Unwrap() error { return e.Err }

// HandleBatch is Handle for several messages in ONE transaction, so that
// they share one commit: it begins a transaction, records the receipts of
// all items in one statement where the dialect can name the fresh ones
// (PostgreSQL, SQLite: RETURNING; on MySQL each item records its own after
// its savepoint), and, for each fresh item in order, sets a savepoint and
// runs its Fn. A Fn that returns an error rolls back to the savepoint and
// its receipt is deleted — its own effects and its receipt only — and the
// next item goes on. A duplicate does not run and needs no savepoint. Then
// HandleBatch commits once.
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
// lost is the item's error (a conflict, see txboxdriver.IsConflictFor), on
// MySQL InnoDB rolls the whole transaction back and the batch fails with a
// *BatchError that wraps the deadlock (a conflict too).
//
// If the transaction fails as a whole (begin, a savepoint statement — as
// when a Fn broke the transaction or its connection —, the commit, ctx),
// nothing committed: HandleBatch returns a *BatchError, which is also the
// Err of every item not rejected as invalid input. A panic in a Fn rolls
// back the whole transaction and propagates.
func (ib *Inbox[TTx]) HandleBatch(ctx context.Context, items []Item[TTx], opts *BatchOptions) ([]ItemResult, error) {
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
	fnCtx := ctx
	var adds *addbuf.Buffer
	if opts != nil && opts.DeferAdds {
		adds = addbuf.New(tx)
		fnCtx = addbuf.With(ctx, adds)
	}
	doom := func(op string, err error) ([]ItemResult, error) {
		done = true
		_ = dtx.Rollback(context.WithoutCancel(ctx))
		return ib.failBatch(ctx, items, res, fresh, start, &BatchError{Op: op, Err: err})
	}
	bulkFresh, err := ib.receiveMany(ctx, dtx, items, res, metas)
	if err != nil {
		return doom("receipts", err)
	}
	for i, it := range items {
		if res[i].Err != nil {
			continue
		}
		bulkOK, inBulk := bulkFresh[i]
		if inBulk && !bulkOK {
			res[i].Result = Duplicate
			ib.hook(ctx, Event{Kind: EventDuplicate, Table: ib.table, Source: it.Source, MessageID: it.ID})
			continue
		}
		if err := ib.sql.Savepoint(ctx, dtx); err != nil {
			return doom("savepoint", err)
		}
		mark := 0
		if adds != nil {
			mark = adds.Len()
		}
		ok := true
		if !inBulk { // its receipt is made here, after the savepoint
			r := inboxsql.Receipt{Source: it.Source, ID: it.ID, Metadata: metas[i], Now: time.Now(), Processed: true}
			ok, err = ib.receive(ctx, dtx, r)
		}
		switch {
		case err != nil:
			res[i].Err = err
		case !ok:
			res[i].Result = Duplicate
			ib.hook(ctx, Event{Kind: EventDuplicate, Table: ib.table, Source: it.Source, MessageID: it.ID})
		default:
			ib.hook(ctx, Event{Kind: EventReceived, Table: ib.table, Source: it.Source, MessageID: it.ID})
			if err := it.Fn(fnCtx, tx); err != nil {
				herr := &HandlerError{Source: it.Source, MessageID: it.ID, Err: err}
				res[i].Err = herr
				ib.hook(ctx, Event{Kind: EventHandleFailed, Table: ib.table, Source: it.Source, MessageID: it.ID, Err: herr, Duration: time.Since(start)})
			}
		}
		if res[i].Err != nil || res[i].Result == Duplicate {
			if err := ib.sql.RollbackSavepoint(ctx, dtx); err != nil {
				return doom("rollback to savepoint", ib.lostConflict(err, res[i].Err))
			}
			if inBulk { // its receipt came before the savepoint
				if err := ib.sql.(inboxsql.BulkReceiver).Forget(ctx, dtx, it.Source, it.ID); err != nil {
					return doom("forget receipt", err)
				}
			}
			if adds != nil {
				adds.Truncate(mark)
			}
			continue
		}
		fresh[i] = true
	}
	if adds != nil && adds.Len() > 0 {
		if err := adds.Flush(ctx, dtx); err != nil {
			return doom("outbox insert", err)
		}
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

// lostConflict is the error of a rollback to an item's savepoint that
// failed: rbErr, or, if the item's error is a conflict
// (txboxdriver.IsConflictFor: InnoDB rolls the whole transaction back after a
// deadlock, its savepoints included), that conflict first and rbErr after
// it, so that the batch's error is classified as the conflict it is. A
// *HandlerError gives its handler's error, the database's.
func (ib *Inbox[TTx]) lostConflict(rbErr, itemErr error) error {
	if !txboxdriver.IsConflictFor(ib.drv, itemErr) {
		return rbErr
	}
	if herr, ok := itemErr.(*HandlerError); ok {
		itemErr = herr.Err
	}
	return fmt.Errorf("%w; the transaction was rolled back: %w", itemErr, rbErr)
}

// receiveMany records, where the dialect can (inboxsql.BulkReceiver), the
// receipts of the batch's valid items in one statement, sorted by key (so
// that concurrent batches lock them in one order), and returns, for the
// first item of each message, whether it was fresh. Later copies of a
// message in the batch are left out: they record their receipts one by
// one, after the first copy ran (a duplicate if it succeeded, fresh if it
// failed and its receipt was forgotten).
func (ib *Inbox[TTx]) receiveMany(ctx context.Context, ex txboxdriver.Executor, items []Item[TTx], res []ItemResult, metas []any) (map[int]bool, error) {
	bulk, ok := ib.sql.(inboxsql.BulkReceiver)
	if !ok {
		return nil, nil
	}
	first := map[inboxsql.Key]int{}
	var rs []inboxsql.Receipt
	now := time.Now()
	for i, it := range items {
		k := inboxsql.Key{Source: it.Source, ID: it.ID}
		if _, seen := first[k]; seen || res[i].Err != nil {
			continue
		}
		first[k] = i
		rs = append(rs, inboxsql.Receipt{Source: it.Source, ID: it.ID, Metadata: metas[i], Now: now, Processed: true})
	}
	slices.SortFunc(rs, func(a, b inboxsql.Receipt) int {
		return cmp.Or(strings.Compare(a.Source, b.Source), strings.Compare(a.ID, b.ID))
	})
	fresh, err := bulk.ReceiveMany(ctx, ex, rs)
	if err != nil {
		return nil, fmt.Errorf("txbox/inbox: record receipts: %w", err)
	}
	out := make(map[int]bool, len(first))
	for k, i := range first {
		out[i] = fresh[k]
	}
	return out, nil
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
