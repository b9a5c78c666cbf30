package redisstream

import (
	"context"
	"fmt"
	"sync"
)

// acks merges the concurrent acknowledgements of one subscription into
// one XACK: the caller that finds no XACK in flight sends its own id and,
// until none is left, every id queued meanwhile by the others, who wait
// for their answer. The consumer settles a committed batch's deliveries
// all at once, so a batch costs about two XACK round trips, not one per
// message; a lone ACK costs what it did.
type acks struct {
	mu       sync.Mutex
	queued   []ackReq
	flushing bool
}

type ackReq struct {
	id   string
	done chan error
}

func (a *acks) ack(ctx context.Context, r *reader, id string) error {
	req := ackReq{id: id, done: make(chan error, 1)}
	a.mu.Lock()
	a.queued = append(a.queued, req)
	if a.flushing {
		a.mu.Unlock()
		select {
		case err := <-req.done:
			return err
		case <-ctx.Done():
			return ctx.Err() // the XACK may still happen: a redelivery, at worst
		}
	}
	a.flushing = true
	a.mu.Unlock()
	for {
		a.mu.Lock()
		batch := a.queued
		a.queued = nil
		if len(batch) == 0 {
			a.flushing = false
			a.mu.Unlock()
			break
		}
		a.mu.Unlock()
		ids := make([]string, len(batch))
		for i, q := range batch {
			ids[i] = q.id
		}
		err := r.rdb.XAck(ctx, r.stream, r.group, ids...).Err()
		if err != nil {
			err = fmt.Errorf("redisstream: XACK %s: %w", r.stream, err)
		}
		for _, q := range batch {
			q.done <- err
		}
	}
	return <-req.done
}
