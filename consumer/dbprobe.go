package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/txbox/txbox/driver"
)

// Probe timing: how often a failed database is asked whether it answers
// again, and how long one question may take.
const (
	probeEvery   = 250 * time.Millisecond
	probeTimeout = time.Second
)

// dbProbe tells the workers whose deliveries failed because the database
// did when it answers again: one probe at a time pings the pool every
// probeEvery while anyone waits, and every waiter resumes on its first
// answer. So an outage costs no delivery counts and no backoff: a retry
// waits for the outage plus at most probeEvery.
type dbProbe struct {
	pool driver.Pool

	mu      sync.Mutex
	round   *probeRound // the probe running now, or nil
	waiters int
}

// probeRound is one probe: done is closed when the database answered (or
// nobody waits any more); down says whether a ping failed first.
type probeRound struct {
	done chan struct{}
	down bool
}

// wait returns once the database has answered a ping made after wait was
// called, or ctx ended (ok false). down reports whether the database
// failed to answer first: it was out, and is back.
func (p *dbProbe) wait(ctx context.Context) (down, ok bool) {
	p.mu.Lock()
	if p.round == nil {
		p.round = &probeRound{done: make(chan struct{})}
		go p.run(p.round)
	}
	r := p.round
	p.waiters++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
	}()
	select {
	case <-r.done:
		return r.down, true
	case <-ctx.Done():
		return false, false
	}
}

// run pings until the database answers or nobody waits, then ends r.
func (p *dbProbe) run(r *probeRound) {
	defer close(r.done)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		_, err := p.pool.Exec(ctx, "SELECT 1")
		cancel()
		p.mu.Lock()
		if err == nil || p.waiters == 0 {
			p.round = nil
			p.mu.Unlock()
			return
		}
		r.down = true
		p.mu.Unlock()
		time.Sleep(probeEvery)
	}
}
