package consumer

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/txbox/txbox"
)

// keyHoldLimit is how long a batch may go without a handler returning
// before an idle worker takes the later deliveries of its keys queued
// behind it (see keyLanes), and how long an Ordered handler's window may
// stay full, with a failing message holding its key that long, before the
// key gate sets that key aside (keyGate.setAsideDue).
const keyHoldLimit = 5 * time.Second

// keyLanes hands the deliveries of a batched binding to its workers so that
// no two workers hold deliveries of one key at once. A keyed delivery goes to
// the lane of the worker that holds its key (it has the key's deliveries
// queued, or in the batch it runs); a delivery whose key no worker holds,
// and an unkeyed one, waits in a shared queue. A free worker takes the
// oldest delivery of its lane and of the shared queue; taking a keyed one
// from the shared queue, it holds the key, and takes the key's other
// deliveries waiting there into its lane. A worker holds a key until the
// last delivery of it that it took has been handled and settled (done).
//
// So a key's deliveries run one batch at a time, in arrival order within
// a batch (in stream order where the deliveries say it: inStreamOrder): a batch never waits on the row or key locks of another batch's
// messages of its keys, and a handler that keeps a key's order itself
// never sees a key's later message while the earlier one is uncommitted
// in another batch. A batch in which no handler has returned for
// keyHoldLimit (a handler stuck until its timeout) stops holding back its
// keys' later deliveries: an idle worker takes them over, so that one
// stuck message never stalls the keys that happened to share its batch.
//
// The queues hold at most limit deliveries not yet taken by a worker (put
// waits for room); a binding's limit is its prefetch.
type keyLanes struct {
	mu     sync.Mutex
	shared []laneItem
	owner  map[string]*keyLane // the lane a key's next delivery goes to
	all    []*keyLane
	seq    uint64        // arrival count, for the oldest-first choice
	room   chan struct{} // one token per delivery queued
	closed bool
	now    func() time.Time
}

// keyLane is one worker's queue and the keys it holds.
type keyLane struct {
	queue []laneItem
	held  map[string]int // key → its deliveries queued here or taken and not done
	busy  time.Time      // when the batch it runs started or a handler of it returned; zero when none
	ready chan struct{}  // cap 1: something to take may have arrived
}

// laneItem is a delivery waiting in a queue, with its key and arrival number.
type laneItem struct {
	d   txbox.Delivery
	key string
	seq uint64
}

func newKeyLanes(workers, limit int) *keyLanes {
	ls := &keyLanes{owner: map[string]*keyLane{}, room: make(chan struct{}, max(limit, workers, 1)), now: time.Now}
	for range workers {
		ls.all = append(ls.all, &keyLane{held: map[string]int{}, ready: make(chan struct{}, 1)})
	}
	return ls
}

// put queues d: in the lane holding its key, else in the shared queue. It
// waits for room until ctx ends; false if d was not queued (ctx ended, or
// the lanes are closed).
func (ls *keyLanes) put(ctx context.Context, d txbox.Delivery) bool {
	select {
	case ls.room <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	key := d.Message().Key
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		<-ls.room
		return false
	}
	ls.seq++
	q := laneItem{d: d, key: key, seq: ls.seq}
	if l := ls.owner[key]; key != "" && l != nil {
		l.queue = append(l.queue, q)
		l.held[key]++
		ls.mu.Unlock()
		signal(l.ready)
		return true
	}
	ls.shared = append(ls.shared, q)
	ls.mu.Unlock()
	for _, l := range ls.all {
		signal(l.ready)
	}
	return true
}

// collect takes a batch for worker l: its first delivery, waiting for one
// as long as needed, then what can be taken within wait after it, up to
// size. keys are the deliveries' keys, for done. ok is false once the
// lanes are closed and nothing was taken.
func (ls *keyLanes) collect(l *keyLane, size int, wait time.Duration) (ds []txbox.Delivery, keys []string, ok bool) {
	q, ok := ls.take(l, nil, false)
	if !ok {
		return nil, nil, false
	}
	ds, keys = append(make([]txbox.Delivery, 0, size), q.d), append(make([]string, 0, size), q.key)
	if size > 1 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for len(ds) < size {
			q, ok := ls.take(l, timer.C, true)
			if !ok {
				break
			}
			ds, keys = append(ds, q.d), append(keys, q.key)
		}
	}
	inStreamOrder(ds, keys)
	ls.mu.Lock()
	l.busy = ls.now()
	ls.mu.Unlock()
	return ds, keys, true
}

// StreamSequencer is an optional capability of a txbox.Delivery: its
// message's position in the stream its binding reads (natsjs: the stream
// sequence), the order in which the relay published a key's messages.
type StreamSequencer interface {
	StreamSequence() uint64
}

// streamSequence is d's StreamSequence, looking through wrappers (the
// keep-alive's); 0 if it has none.
func streamSequence(d txbox.Delivery) uint64 {
	for {
		if s, ok := d.(StreamSequencer); ok {
			return s.StreamSequence()
		}
		u, ok := d.(interface{ Unwrap() txbox.Delivery })
		if !ok {
			return 0
		}
		d = u.Unwrap()
	}
}

// inStreamOrder puts the deliveries of each key of a batch in stream order
// (StreamSequencer), in the places the key's deliveries hold in the batch,
// when the broker says it for all of them: a message redelivered after a
// kill arrives after its key's later messages, and runs before them.
func inStreamOrder(ds []txbox.Delivery, keys []string) {
	at := map[string][]int{}
	for i, k := range keys {
		if k != "" {
			at[k] = append(at[k], i)
		}
	}
	for _, is := range at {
		if len(is) < 2 {
			continue
		}
		type item struct {
			d   txbox.Delivery
			seq uint64
		}
		items := make([]item, len(is))
		known := true
		for j, i := range is {
			items[j] = item{ds[i], streamSequence(ds[i])}
			known = known && items[j].seq > 0
		}
		if !known {
			continue
		}
		sort.SliceStable(items, func(a, b int) bool { return items[a].seq < items[b].seq })
		for j, i := range is {
			ds[i] = items[j].d
		}
	}
}

// take returns the next delivery for l (see pop), waiting until one comes,
// timeout fires (nil: never) or the lanes close.
func (ls *keyLanes) take(l *keyLane, timeout <-chan time.Time, own bool) (laneItem, bool) {
	for {
		ls.mu.Lock()
		q, ok := ls.pop(l, own)
		closed := ls.closed
		steal := ls.stealAt(l)
		ls.mu.Unlock()
		if ok {
			<-ls.room
			return q, true
		}
		if closed {
			return laneItem{}, false
		}
		var stealC <-chan time.Time
		var t *time.Timer
		if !steal.IsZero() {
			t = time.NewTimer(max(steal.Sub(ls.now()), time.Millisecond))
			stealC = t.C
		}
		timedOut := false
		select {
		case <-l.ready:
		case <-stealC:
		case <-timeout:
			timedOut = true
		}
		if t != nil {
			t.Stop()
		}
		if timedOut {
			return laneItem{}, false
		}
	}
}

// pop takes the oldest delivery of l's queue and of the shared queue, or,
// if own, l's own first; a keyed one from the shared queue makes l hold
// its key, with the key's other shared deliveries. With neither, it takes
// over from a lane whose batch is stuck (see steal).
//
// A batch takes its first delivery oldest first, so that no delivery waits
// behind a lane's keys for long, and the rest from its own lane first: a
// batch holds all it can of few keys rather than one message each of many
// keys, which would leave them all to one worker and the others idle.
func (ls *keyLanes) pop(l *keyLane, own bool) (laneItem, bool) {
	if len(l.queue) == 0 && len(ls.shared) == 0 && !ls.steal(l) {
		return laneItem{}, false
	}
	if len(l.queue) > 0 && (own || len(ls.shared) == 0 || l.queue[0].seq < ls.shared[0].seq) {
		q := l.queue[0]
		l.queue[0] = laneItem{}
		l.queue = l.queue[1:]
		return q, true
	}
	q := ls.shared[0]
	ls.shared[0] = laneItem{}
	ls.shared = ls.shared[1:]
	if q.key != "" {
		// No lane holds q.key: a key's deliveries wait in the shared
		// queue only while none does.
		ls.owner[q.key] = l
		l.held[q.key]++
		kept := ls.shared[:0]
		for _, o := range ls.shared {
			if o.key == q.key {
				l.queue = append(l.queue, o)
				l.held[q.key]++
			} else {
				kept = append(kept, o)
			}
		}
		clear(ls.shared[len(kept):])
		ls.shared = kept
	}
	return q, true
}

// steal moves into l's queue the oldest queued delivery of a lane whose
// batch has made no progress for keyHoldLimit, with the other deliveries of its key
// queued there, and makes l the lane the key's next deliveries go to.
// false if there is none.
func (ls *keyLanes) steal(l *keyLane) bool {
	now := ls.now()
	var from *keyLane
	for _, o := range ls.all {
		if o != l && len(o.queue) > 0 && !o.busy.IsZero() && now.Sub(o.busy) >= keyHoldLimit &&
			(from == nil || o.queue[0].seq < from.queue[0].seq) {
			from = o
		}
	}
	if from == nil {
		return false
	}
	key := from.queue[0].key
	kept := from.queue[:0]
	for _, o := range from.queue {
		if o.key == key {
			l.queue = append(l.queue, o)
			l.held[key]++
			from.held[key]--
		} else {
			kept = append(kept, o)
		}
	}
	clear(from.queue[len(kept):])
	from.queue = kept
	if from.held[key] == 0 {
		delete(from.held, key)
	}
	ls.owner[key] = l
	return true
}

// stealAt is when l may next take over from another lane (see steal);
// zero if no other lane has deliveries queued behind a running batch.
func (ls *keyLanes) stealAt(l *keyLane) time.Time {
	var at time.Time
	for _, o := range ls.all {
		if o != l && len(o.queue) > 0 && !o.busy.IsZero() {
			if t := o.busy.Add(keyHoldLimit); at.IsZero() || t.Before(at) {
				at = t
			}
		}
	}
	return at
}

// progress notes that a handler of l's batch returned.
func (ls *keyLanes) progress(l *keyLane) {
	ls.mu.Lock()
	if !l.busy.IsZero() {
		l.busy = ls.now()
	}
	ls.mu.Unlock()
}

// done ends l's batch: the deliveries of keys, taken by collect, are
// settled; l stops holding a key when none of its deliveries is left.
func (ls *keyLanes) done(l *keyLane, keys []string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l.busy = time.Time{}
	for _, k := range keys {
		if k == "" {
			continue
		}
		if l.held[k]--; l.held[k] > 0 {
			continue
		}
		delete(l.held, k)
		if ls.owner[k] == l {
			delete(ls.owner, k)
		}
	}
}

// close ends the lanes: the workers' collect returns what it has, then
// false, and close returns the deliveries still queued, for release.
func (ls *keyLanes) close() []txbox.Delivery {
	ls.mu.Lock()
	ls.closed = true
	var out []txbox.Delivery
	for _, q := range ls.shared {
		out = append(out, q.d)
	}
	ls.shared = nil
	for _, l := range ls.all {
		for _, q := range l.queue {
			out = append(out, q.d)
		}
		l.queue = nil
	}
	ls.mu.Unlock()
	for range out {
		<-ls.room
	}
	for _, l := range ls.all {
		signal(l.ready)
	}
	return out
}

// signal wakes whoever waits on c (cap 1), if nobody did yet.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
