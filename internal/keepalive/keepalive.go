// Package keepalive calls a function every period until it is stopped:
// what keeps a broker's ack deadline from passing while a delivery waits
// or runs (the consumer's keep-alive, the JetStream subscription's queue).
package keepalive

import (
	"sync"
	"time"
)

// Ticker calls its function every period, the first time one period after
// Start, until Stop.
type Ticker struct {
	mu    sync.Mutex
	t     *time.Timer
	every time.Duration
	fn    func()
	done  bool
}

// Start calls fn every period from now on, until Stop.
func Start(every time.Duration, fn func()) *Ticker {
	k := &Ticker{every: every, fn: fn}
	k.mu.Lock()
	k.t = time.AfterFunc(every, k.tick)
	k.mu.Unlock()
	return k
}

func (k *Ticker) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return
	}
	k.fn()
	k.t.Reset(k.every)
}

// Stop ends the calls: a call under way finishes first, and none starts
// after Stop returns. Stop on a nil Ticker does nothing.
func (k *Ticker) Stop() {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.done = true
	k.t.Stop()
	k.mu.Unlock()
}
