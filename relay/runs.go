package relay

import (
	"context"
	"errors"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/pubtrace"
)

// errHeldBack is the answer of a message of a run that was not sent: the
// message of its key before it in the batch failed or is invalid. It is
// released untouched and counts no attempt.
var errHeldBack = errors.New("txbox/relay: not sent: the message of its key before it was not acknowledged")

// publish publishes a batch's messages: in one call, or, when the batch
// holds runs of a key, in waves (publishRuns).
func (r *Relay) publish(ctx context.Context, batch *outboxsql.Batch, out prepared) []error {
	if batch.Runs() {
		return r.publishRuns(ctx, batch, out)
	}
	return r.publishWave(ctx, out.msgs)
}

// publishWave is one Publish call, its answers read on their own
// (blameMessages).
func (r *Relay) publishWave(ctx context.Context, msgs []txbox.Message) []error {
	if r.trace != nil {
		ctx = pubtrace.With(ctx, r.trace)
	}
	errs := r.pub.Publish(ctx, msgs)
	blameMessages(errs)
	return errs
}

// publishRuns publishes a batch claimed with runs (Claimed.Prev) in waves:
// the first holds every message that follows no other of the batch, and
// each next wave the messages whose predecessor the broker acknowledged in
// the wave before. A key's messages thus reach the broker one after the
// other, each only once the one before it is stored, as they would over
// several rounds; a message whose predecessor failed, or was an invalid
// row (not among the messages), is not sent (errHeldBack). Each wave's
// answers are read on their own (publishWave).
func (r *Relay) publishRuns(ctx context.Context, batch *outboxsql.Batch, out prepared) []error {
	const (
		waiting = iota
		acked
		failed
	)
	n := len(out.msgs)
	errs := make([]error, n)
	state := make([]int8, n)
	bySeq := make(map[int64]int, n) // row seq → message index
	for i := range out.msgs {
		bySeq[batch.Rows[out.rowOf[i]].Seq] = i
	}
	wave := make([]int, 0, n)
	msgs := make([]txbox.Message, 0, n)
	for {
		wave, msgs = wave[:0], msgs[:0]
		for i := range out.msgs {
			if state[i] != waiting {
				continue
			}
			prev := batch.Rows[out.rowOf[i]].Prev
			if prev == 0 {
				wave = append(wave, i)
				continue
			}
			p, ok := bySeq[prev]
			switch {
			case !ok || state[p] == failed:
				state[i], errs[i] = failed, errHeldBack
			case state[p] == acked:
				wave = append(wave, i)
			}
		}
		if len(wave) == 0 {
			return errs
		}
		for _, i := range wave {
			msgs = append(msgs, out.msgs[i])
		}
		werrs := r.publishWave(ctx, msgs)
		for j, i := range wave {
			state[i] = acked
			if werrs != nil && werrs[j] != nil {
				state[i], errs[i] = failed, werrs[j]
			}
		}
	}
}

// held counts the messages publishRuns did not send.
func held(errs []error) int {
	n := 0
	for _, err := range errs {
		if errors.Is(err, errHeldBack) {
			n++
		}
	}
	return n
}
