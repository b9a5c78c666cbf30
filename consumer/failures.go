package consumer

import (
	"sync"
	"time"
)

// maxTracked bounds how many messages a Consumer keeps failure counts for.
const maxTracked = 1 << 16

// failures counts, per (handler, message id), the deliveries this consumer
// saw fail for the message's own reasons: the count MaxDeliveries is
// compared with. The broker's delivery count cannot serve: it includes the
// deliveries that failed because the database did. A count is forgotten
// when its message is settled for good (acknowledged or dead-lettered), and
// when it has not moved for stale (the message went to another replica);
// forgetting only ever gives a message more deliveries, never fewer.
type failures struct {
	mu    sync.Mutex
	m     map[failureKey]*failureCount
	stale time.Duration
}

type failureKey struct{ handler, id string }

type failureCount struct {
	n    int
	last time.Time
}

func newFailures(stale time.Duration) *failures {
	return &failures{m: map[failureKey]*failureCount{}, stale: stale}
}

// add records one more failure of the message and returns its count.
func (f *failures) add(handler, id string, now time.Time) int {
	k := failureKey{handler, id}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.m[k]
	if e == nil {
		if len(f.m) >= maxTracked {
			f.evict(now)
		}
		e = &failureCount{}
		f.m[k] = e
	}
	e.n++
	e.last = now
	return e.n
}

// forget drops the message's count.
func (f *failures) forget(handler, id string) {
	f.mu.Lock()
	delete(f.m, failureKey{handler, id})
	f.mu.Unlock()
}

// evict makes room: counts that have not moved for f.stale go first, then,
// if that freed too little, arbitrary ones down to half the cap.
func (f *failures) evict(now time.Time) {
	for k, e := range f.m {
		if now.Sub(e.last) > f.stale {
			delete(f.m, k)
		}
	}
	if len(f.m) < maxTracked {
		return
	}
	for k := range f.m {
		if len(f.m) <= maxTracked/2 {
			break
		}
		delete(f.m, k)
	}
}
