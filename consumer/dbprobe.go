package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// Probe timing: how often a failed database is asked whether it answers
// again, how long one question may take, and how many questions in a row
// one round may ask when they fail at once (each one takes a pooled
// connection the outage killed out of the pool).
const (
	probeEvery   = 100 * time.Millisecond
	probeTimeout = time.Second
	probeBurst   = 16
)

// dbProbe tells the workers whose deliveries failed because the database
// did when it answers again: one probe at a time pings the pool every
// probeEvery while anyone waits, and every waiter resumes on its first
// answer. So an outage costs no delivery counts and no backoff: a retry
// waits for the outage plus about probeEvery.
type dbProbe struct {
	pool txboxdriver.Pool

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
// Pings that fail at once (on connections the outage killed, which the
// pool drops one per failure) are repeated at once, up to probeBurst.
func (p *dbProbe) run(r *probeRound) {
	defer close(r.done)
	for quick := 0; ; quick++ {
		start := time.Now()
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
		if quick < probeBurst && time.Since(start) < probeEvery/10 {
			continue
		}
		quick = 0
		time.Sleep(probeEvery)
	}
}
