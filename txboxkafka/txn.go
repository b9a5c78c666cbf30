package txboxkafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
)

// ErrFenced is wrapped by the errors of a transactional Publisher whose
// transactional id another producer took over (a relay started with the
// same id): Kafka fenced this one, which can never commit again. The
// errors wrap txbox.ErrPublisherClosed too, so the relay stops. Whoever
// runs the relay should exit rather than connect again with the same id,
// which would fence the successor in turn. Not every takeover is named so:
// a commit racing it can be refused as in an invalid state
// (kerr.InvalidTxnState), an error that wraps txbox.ErrPublisherClosed and
// not ErrFenced. A new client with the id takes it from whoever holds it,
// so after any error wrapping txbox.ErrPublisherClosed, make one only when
// no other relay can hold the id (`txbox relay` exits instead).
var ErrFenced = errors.New("txboxkafka: fenced: another producer with the same transactional id took over")

// errNotCommitted is the error of a message whose transaction was aborted
// because another message of it failed; it is transient.
var errNotCommitted = errors.New("txboxkafka: not committed: another message of its transaction failed, and the transaction was aborted")

// abortTimeout bounds the wait for a transaction's abort: for the records
// in flight to be answered, then for the broker's answer to EndTxn. An
// abort that did not get through in that time is tried again before the
// next transaction; the bound keeps a relay's stop (which waits
// PublishTimeout + 10 s for the round in flight) from outwaiting it. A
// commit and the abort after it share this bound.
const abortTimeout = 10 * time.Second

// commitTimeout bounds the wait for the broker's answer to a commit
// (EndTxn), which begins once every record of the transaction is
// acknowledged and does not end with the publish's context. A commit
// unanswered in that time has an unknown outcome: the transaction is
// aborted (in what is left of abortTimeout), which changes nothing if it
// committed, and its messages are sent again.
const commitTimeout = 5 * time.Second

// publishTxn publishes msgs in one transaction: it begins it, produces
// every message, waits for the acks, and commits. A message the cluster
// refuses (txbox.Reject) aborts the transaction; the others are produced
// again at once in a new one, so that one refused message costs the
// others nothing. Any other failure aborts the transaction and fails every
// message not committed with a transient error. Calls take turns.
func (p *Publisher) publishTxn(ctx context.Context, msgs []txbox.Message) []error {
	p.txnMu.Lock()
	defer p.txnMu.Unlock()
	errs := make([]error, len(msgs))
	todo := make([]int, len(msgs))
	for i := range todo {
		todo[i] = i
	}
	batch := make([]txbox.Message, 0, len(msgs))
	for {
		batch = batch[:0]
		for _, i := range todo {
			batch = append(batch, msgs[i])
		}
		berrs := p.transact(ctx, batch)
		if berrs == nil { // committed
			for _, err := range errs {
				if err != nil {
					return errs
				}
			}
			return nil
		}
		var again []int
		transient := false
		for j, i := range todo {
			switch err := berrs[j]; {
			case err == nil:
				again = append(again, i)
			case txbox.IsRejected(err):
				errs[i] = err
			default:
				errs[i], transient = err, true
			}
		}
		if transient || len(again) == 0 || len(again) == len(todo) || ctx.Err() != nil || p.broken != nil {
			for _, i := range again {
				errs[i] = errNotCommitted
			}
			return errs
		}
		todo = again
	}
}

// transact runs one transaction of msgs and returns nil once it
// committed, else each message's error: Reject for a message the cluster
// refused, nil for one that was acknowledged but not committed (the
// transaction was aborted because of another), and a transient error (or
// one wrapping txbox.ErrPublisherClosed) for the others.
func (p *Publisher) transact(ctx context.Context, msgs []txbox.Message) []error {
	fill := func(err error) []error {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if p.broken != nil {
		return fill(p.broken)
	}
	if p.abortPending {
		// The last abort did not get through: a transaction may be open.
		if err := p.abort(); err != nil {
			return fill(err)
		}
	}
	if err := p.cl.BeginTransaction(); err != nil {
		p.broken = p.fatal(fmt.Errorf("txboxkafka: begin transaction %q: %w", p.txnID, err))
		return fill(p.broken)
	}
	errs := p.produce(ctx, msgs)
	if errs == nil {
		var end time.Time      // a commit and the abort after it share abortTimeout
		err := p.cl.Flush(ctx) // nothing is buffered once every record is acknowledged
		if err == nil {
			// Every record is acknowledged: the commit is not cut short
			// by ctx (the publish timeout, which also ran while this call
			// waited for its turn), whose end would leave its outcome
			// unknown and its messages sent again although committed.
			// commitTimeout bounds it instead.
			end = time.Now().Add(abortTimeout)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
			err = p.cl.EndTransaction(cctx, kgo.TryCommit)
			cancel()
			if err == nil {
				return nil
			}
		}
		// The commit's outcome may be unknown (its answer lost): the
		// abort ends the transaction if it is still open, and changes
		// nothing if it committed.
		err = fmt.Errorf("txboxkafka: commit transaction %q: %w", p.txnID, err)
		if isFenced(err) {
			p.broken = p.fatal(err)
			return fill(p.broken)
		}
		if end.IsZero() {
			end = time.Now().Add(abortTimeout)
		}
		if aerr := p.abortBy(end); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return fill(err)
	}
	for i, err := range errs {
		if isFenced(err) {
			p.broken = p.fatal(fmt.Errorf("txboxkafka: produce in transaction %q: %w", p.txnID, err))
			return fill(p.broken)
		}
		if err != nil && !txbox.IsRejected(err) {
			errs[i] = err
		}
	}
	if aerr := p.abort(); aerr != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = aerr
			}
		}
	}
	return errs
}

// abort waits for the records in flight to be answered and aborts the
// open transaction, if any. An abort that did not get through is tried
// again before the next transaction begins (abortPending).
func (p *Publisher) abort() error { return p.abortBy(time.Now().Add(abortTimeout)) }

// abortBy is abort, bounded by end.
func (p *Publisher) abortBy(end time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	p.abortPending = true
	err := p.cl.AbortBufferedRecords(ctx)
	if err == nil {
		// An abort whose outcome is unknown is tried again; the retry
		// reloads the producer id, which ends what is still open.
		for try := 0; try < 3; try++ {
			if err = p.cl.EndTransaction(ctx, kgo.TryAbort); err == nil || ctx.Err() != nil {
				break
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("txboxkafka: abort transaction %q: %w", p.txnID, err)
		if isFenced(err) {
			p.broken = p.fatal(err)
			return p.broken
		}
		return err
	}
	p.abortPending = false
	return nil
}

// isFenced reports whether err says another producer took over the
// transactional id.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// fatal wraps err, an error after which the client can never commit
// again, with txbox.ErrPublisherClosed, and with ErrFenced when it says
// another producer took over the transactional id.
func (p *Publisher) fatal(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("%w: %w: %w", txbox.ErrPublisherClosed, ErrFenced, err)
	}
	return fmt.Errorf("%w: %w", txbox.ErrPublisherClosed, err)
}
