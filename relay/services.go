package relay

import (
	"context"
	"sync"
	"time"

	"github.com/txbox/txbox"
)

// services are the work a store's relay does beside its rounds, wherever
// it runs (alone or in a Group): the lane lease heartbeat of a relay with
// lanes, the observer's samples, the claim check sweep.
type services struct {
	r      *Relay
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// ready is closed once the relay's first lanes are taken (its first
	// heartbeat went through or failed), at once without lanes.
	ready chan struct{}
}

// wakeHook is what Relay.Wake calls instead of ringing the relay's own
// loop: it queues the relay's turn in its Group.
type wakeHook struct{ fn func() }

// startServices starts r's services until ctx ends or stop. A relay with
// lanes beats its heartbeat in the background: its first lanes come with
// its first beat, which its first round waits for (ready), and a fenced
// lane wakes the relay (Relay.Wake).
func (r *Relay) startServices(ctx context.Context) *services {
	ctx, cancel := context.WithCancel(ctx)
	s := &services{r: r, cancel: cancel, ready: make(chan struct{})}
	if r.lanes != nil {
		s.wg.Go(func() {
			err := r.lanes.beat(ctx)
			close(s.ready)
			if err != nil && ctx.Err() == nil {
				r.lanes.outage.failed(r.log, err, 0, false, time.Now())
			}
			r.lanes.run(ctx)
		})
	} else {
		close(s.ready)
	}
	if r.obs != nil {
		s.wg.Go(func() { r.sampleLoop(ctx) })
	}
	if len(r.cfg.ClaimChecks) > 0 {
		s.wg.Go(func() { r.claimCheckLoop(ctx) })
	}
	return s
}

// sampleFirst hands the Observer a sample at once, as the relay starts
// serving (Relay.Start, Group.Add): a scrape right after a
// restart sees the sample's gauges, the backlog and the oldest ages.
func (r *Relay) sampleFirst(ctx context.Context) {
	if r.obs == nil {
		return
	}
	s := r.sample(ctx, txbox.RelaySample{})
	if ctx.Err() == nil {
		r.obs.Sampled(s)
	}
}

// sampleLoop hands the Observer a sample every SampleInterval after the
// first (sampleFirst), beside the rounds: a round stuck on the broker
// stops none of the gauges that show it (the oldest in-flight age).
func (r *Relay) sampleLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.test.SampleInterval)
	defer t.Stop()
	var last txbox.RelaySample
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		last = r.sample(ctx, last)
		if ctx.Err() != nil {
			return
		}
		r.obs.Sampled(last)
	}
}

// stop ends the services, once the relay's rounds are over, and gives its
// lanes up.
func (s *services) stop(ctx context.Context) {
	s.cancel()
	s.wg.Wait()
	if s.r.lanes != nil {
		s.r.lanes.leave(ctx)
	}
}
