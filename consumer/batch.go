package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/addbuf"
	"github.com/txbox/txbox/txboxdriver"
)

// Defaults of BatchConfig.
const (
	DefaultBatchSize = 32
	DefaultBatchWait = 2 * time.Millisecond
)

// BatchConfig sets how an Inbox handler's deliveries share transactions.
// Each of the handler's Concurrency workers takes a delivery, then waits up
// to Wait for more, up to Size, and handles them in ONE transaction, each
// message under its own savepoint (inbox.HandleBatch): a failing handler
// rolls back only its own effects and receipt and is retried or
// dead-lettered alone; the rest commit together, once, and are then ACKed
// together. At-least-once handlers are never batched. No two batches of a
// binding hold messages of one key at once: a key's messages run one batch
// at a time, in arrival order within a batch, or in stream order where the
// broker says it (see keyLanes, StreamSequencer).
//
// The trade-offs: the handlers of a batch run one after another on one
// connection, and hold their row locks until the batch commits. A
// transaction that fails as a whole undoes the whole batch: after a
// deadlock (as InnoDB rolls back) it runs again at once; after a failed
// commit or a transaction a handler left aborted its messages are handled
// again at once, each in a transaction of its own, and the one that broke
// it fails alone; after a lost connection they are retried when the
// database answers. A handler's database effects still commit once (the
// inbox), its effects outside the database happen once more.
type BatchConfig struct {
	// Size is the most deliveries in one transaction; 1 turns batching
	// off (one transaction per message). Default: DefaultBatchSize (32).
	Size int
	// Wait is the longest a worker waits, after its first delivery, to
	// fill a batch: what batching may add to a message's latency. Default:
	// DefaultBatchWait (2ms).
	Wait time.Duration
	// ImmediateAdds makes the handlers' Outbox.Add calls on the batch's
	// transaction insert their rows at once, as unbatched, for a handler
	// that reads its own outbox rows back in the transaction. By default
	// they are deferred (inbox.BatchOptions.DeferAdds): an Add validates
	// its messages and returns their ids without a round trip, and the rows
	// of the whole batch are inserted in one statement just before the
	// batch commits, sorted by key, so that every batch takes the per-key
	// order locks of its keyed rows in one global order and concurrent
	// batches adding the same keys cannot deadlock. Immediate keyed Adds
	// hold their keys' locks, taken in handler order, until the batch
	// commits: concurrent batches then deadlock on shared keys (each
	// deadlock retried at once, see docs/guide/consumer.md). Default: false;
	// set in Config or in any HandlerConfig of a batch, the whole batch
	// adds at once.
	ImmediateAdds bool
}

// batching returns h's batch size and wait: its own, else the Config's,
// else the defaults. Size 1 means unbatched; AtLeastOnce handlers are.
func (c *Consumer[TTx]) batching(h *handler[TTx]) (int, time.Duration) {
	if h.guarantee != Inbox {
		return 1, 0
	}
	size := firstPositive(h.Batch.Size, c.cfg.Batch.Size, DefaultBatchSize)
	wait := firstPositive(h.Batch.Wait, c.cfg.Batch.Wait, DefaultBatchWait)
	return size, wait
}

func firstPositive[T int | time.Duration](vs ...T) T {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// bindingBatching returns the batch size and fill wait of b's workers: the
// largest of its batched (Inbox) routes'; size 1 when none is batched, and
// for an Ordered handler (not batched).
func (c *Consumer[TTx]) bindingBatching(b *binding[TTx]) (int, time.Duration) {
	size, wait := 1, time.Duration(0)
	if b.ordered() {
		return size, wait // an Ordered handler's deliveries run one at a time
	}
	for _, h := range b.routes {
		if s, w := c.batching(h); s > 1 {
			size, wait = max(size, s), max(wait, w)
		}
	}
	return size, wait
}

// prefetch is how many unacknowledged deliveries b's subscription may hold:
// twice its concurrency, or, batched, enough for every worker to fill its
// batch.
func (c *Consumer[TTx]) prefetch(b *binding[TTx]) int {
	n := b.concurrency
	if size, _ := c.bindingBatching(b); size > 1 {
		return max(2*n, n*size)
	}
	return 2 * n
}

// runBatches is one batching worker, l of ls: it takes a batch from its
// lane (keyLanes.collect) and handles it, until the lanes are closed. After a
// batch that failed as a whole its batches start again from one message,
// and grow back by doubling after each committed batch (by one after a
// message handled alone), so that while the database keeps failing (a
// flapping connection) a worker risks little work per transaction, as
// unbatched.
func (c *Consumer[TTx]) runBatches(ctx context.Context, b *binding[TTx], ls *keyLanes, l *keyLane, size int, wait time.Duration) {
	cur := size
	for {
		ds, keys, ok := ls.collect(l, cur, wait)
		if !ok {
			return
		}
		outcome := c.processBatch(ctx, b, ds, func() { ls.progress(l) })
		ls.done(l, keys)
		switch outcome {
		case batchFailed:
			cur = 1
		case batchCommitted:
			cur = min(size, 2*cur)
		default: // one delivery, handled alone: its outcome is not known here
			cur = min(size, cur+1)
		}
	}
}

// What processBatch did.
const (
	batchUnbatched = iota // one delivery, handled alone
	batchCommitted
	batchFailed // failed as a whole
)

// batchJob is one delivery of a batch on its way to the batch's
// transaction: process hands it over from the delivery's own goroutine,
// with the context its tracer made, and waits for its outcome.
type batchJob[TTx any] struct {
	i    int
	skip bool // process settled the delivery without running it
	ctx  context.Context
	h    *handler[TTx]
	msg  Message
	out  chan batchOutcome
}

type batchOutcome struct {
	dup bool
	err error
}

// processBatch routes ds (see dispatch) and handles the deliveries of
// batched Inbox routes in one transaction; the others (at-least-once or
// unbatched routes) are processed alone, side by side with the batch, and
// the unrouted ones get b's policy. Each batched delivery goes through
// processWith on its own goroutine — its observer and tracer calls, its
// settlement, concurrently with the others' (the ACKs of a batch are
// pipelined) — whose run step hands the message to this goroutine and
// waits for the batch to commit. progress is called whenever a handler of
// the batch returns.
func (c *Consumer[TTx]) processBatch(ctx context.Context, b *binding[TTx], all []txbox.Delivery, progress func()) int {
	var ds []txbox.Delivery
	var hs []*handler[TTx]
	var alone sync.WaitGroup
	defer alone.Wait()
	for _, d := range all {
		msg := d.Message()
		h := c.route(b, &msg)
		switch {
		case h == nil:
			c.unrouted(ctx, b, d, &msg)
		case func() bool { s, _ := c.batching(h); return s <= 1 }():
			alone.Add(1)
			go func() {
				defer alone.Done()
				c.process(ctx, h, d)
			}()
		default:
			ds, hs = append(ds, d), append(hs, h)
		}
	}
	if len(ds) == 0 {
		return batchUnbatched
	}
	if len(ds) == 1 {
		c.process(ctx, hs[0], ds[0])
		return batchUnbatched
	}
	jobs := make(chan batchJob[TTx], len(ds))
	var settled sync.WaitGroup
	for i, d := range ds {
		h := hs[i]
		settled.Add(1)
		go func() {
			defer settled.Done()
			submitted := false
			defer func() {
				if !submitted {
					jobs <- batchJob[TTx]{i: i, skip: true}
				}
			}()
			c.processWith(ctx, h, d, func(ctx context.Context, msg Message) (bool, error) {
				submitted = true
				out := make(chan batchOutcome, 1)
				jobs <- batchJob[TTx]{i: i, ctx: ctx, h: h, msg: msg, out: out}
				o := <-out
				return o.dup, o.err
			})
		}()
	}
	batch := make([]batchJob[TTx], len(ds))
	for range ds {
		j := <-jobs
		batch[j.i] = j
	}
	outcome := c.runBatch(ctx, batch, progress)
	settled.Wait()
	return outcome
}

// runBatch runs the jobs in one inbox transaction and hands each its
// outcome. If the transaction fails as a whole because the database did
// (txboxdriver.IsTransientFor: a lost connection; a conflict that lost every
// time it ran again, see handleBatch), every job gets that failure: retried
// when the database answers, not counted. If it fails for another
// reason (a commit refused by a deferred constraint, a transaction a
// handler left aborted), the jobs run again at once, each in its own
// transaction (c.invoke), so that the message that broke the batch fails
// alone and the outcome of each is its own.
func (c *Consumer[TTx]) runBatch(ctx context.Context, batch []batchJob[TTx], progress func()) int {
	var items []inbox.Item[TTx]
	var idx []int
	for i, j := range batch {
		switch {
		case j.skip:
		case j.msg.ID == "":
			j.out <- batchOutcome{err: errNoID}
		default:
			items = append(items, inbox.Item[TTx]{Source: j.h.Name, ID: j.msg.ID, Metadata: metadata(j.msg),
				Fn: func(ictx context.Context, tx TTx) error {
					defer progress()
					// The message's own context (its trace span), with the
					// batch's deferred Adds, if any.
					return c.timed(addbuf.With(j.ctx, addbuf.From(ictx)), j.h, func(ctx context.Context) error {
						return callTx(ctx, j.h, tx, j.msg)
					})
				}})
			idx = append(idx, i)
		}
	}
	if len(items) == 0 {
		return batchUnbatched
	}
	// Deferred Adds unless the Config or a handler of the batch asks for
	// immediate ones (a handler that reads its own outbox rows).
	deferAdds := !c.cfg.Batch.ImmediateAdds
	for _, i := range idx {
		deferAdds = deferAdds && !batch[i].h.Batch.ImmediateAdds
	}
	res, err := c.handleBatch(ctx, items, &inbox.BatchOptions{DeferAdds: deferAdds})
	var berr *inbox.BatchError
	if errors.As(err, &berr) && ctx.Err() == nil && !txboxdriver.IsTransientFor(c.drv, berr.Err) {
		c.batchesFailed.Add(1)
		c.log.Warn("txbox/consumer: a batch transaction failed as a whole; handling its messages one by one",
			"handler", batch[idx[0]].h.Name, "messages", len(items), "err", err)
		for _, i := range idx {
			j := batch[i]
			dup, err := c.invoke(j.ctx, j.h, j.msg)
			progress()
			j.out <- batchOutcome{dup: dup, err: err}
		}
		return batchFailed
	}
	for k, i := range idx {
		batch[i].out <- batchOutcome{dup: res[k].Result == inbox.Duplicate, err: res[k].Err}
	}
	if err != nil {
		// The database failed (a lost connection, a deadlock that took the
		// whole transaction every time): every message is retried when the
		// database answers, not counted toward MaxDeliveries (processWith:
		// not the handler's).
		c.batchesFailed.Add(1)
		return batchFailed
	}
	c.batches.Add(1)
	return batchCommitted
}

// handleBatch is HandleBatch, with conflicts run again at once
// (againOnConflict): a batch that lost one as a whole (InnoDB rolls the
// transaction back) runs again as a batch; an item that lost one on its
// own statement (PostgreSQL: rolled back to its savepoint, the rest
// committed) runs again alone.
func (c *Consumer[TTx]) handleBatch(ctx context.Context, items []inbox.Item[TTx], opts *inbox.BatchOptions) ([]inbox.ItemResult, error) {
	res, err := c.ib.HandleBatch(ctx, items, opts)
	for try := 0; try < maxConflictRetries && c.conflict(ctx, err); try++ {
		c.conflicts.Add(1)
		res, err = c.ib.HandleBatch(ctx, items, opts)
	}
	if err != nil {
		return res, err
	}
	for i, r := range res {
		if !c.conflict(ctx, r.Err) {
			continue
		}
		it := items[i]
		c.conflicts.Add(1)
		res[i].Result, res[i].Err = c.againOnConflict(ctx, func() (inbox.Result, error) {
			return c.ib.Handle(ctx, it.Source, it.ID, it.Metadata, it.Fn)
		})
	}
	return res, nil
}

var errNoID = Permanent(errors.New("message has no id (Nats-Msg-Id / message_id): the inbox cannot deduplicate it"))

// metadata is the receipt's metadata of msg.
func metadata(msg Message) map[string]any {
	return map[string]any{"topic": msg.Topic, "binding": msg.Binding, "deliveries": msg.Deliveries}
}

// callTx runs h's function in tx, recovering a panic as a *PanicError: in a
// batch a panic must fail its message only.
func callTx[TTx any](ctx context.Context, h *handler[TTx], tx TTx, msg Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v}
		}
	}()
	return h.txFn(ctx, tx, msg)
}

// checkBatch reports a handler's invalid batch settings.
func checkBatch(label string, b BatchConfig) string {
	if b.Size < 0 || b.Wait < 0 {
		return fmt.Sprintf("%s has a negative Batch.Size or Batch.Wait", label)
	}
	return ""
}
