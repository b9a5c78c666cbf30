package consumer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

func laneIDs(ds []txbox.Delivery) []string {
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.(*gateDelivery).id)
	}
	return ids
}

// A key's deliveries go to the worker that holds it, in arrival order;
// a free worker takes the oldest of its lane and of the shared queue, and
// with a keyed one the key; the key is free again once the worker is done
// with its last delivery of it; close returns what is still queued.
func TestKeyLanes(t *testing.T) {
	ls := newKeyLanes(2, 100)
	ctx := context.Background()
	put := func(id, key string) {
		t.Helper()
		if !ls.put(ctx, &gateDelivery{id: id, key: key}) {
			t.Fatalf("put %s refused", id)
		}
	}
	w0, w1 := ls.all[0], ls.all[1]
	collect := func(l *keyLane, size int, want ...string) []string {
		t.Helper()
		ds, keys, ok := ls.collect(l, size, time.Millisecond)
		if !ok || !slices.Equal(laneIDs(ds), want) {
			t.Fatalf("collect: got %v (ok %v), want %v", laneIDs(ds), ok, want)
		}
		return keys
	}
	put("a1", "a")
	put("b1", "b")
	put("a2", "a")
	put("u1", "")
	put("a3", "a")
	// w0 takes a1, and with it key a (a2, a3 move to its lane), then fills
	// its batch from its lane first.
	k0 := collect(w0, 2, "a1", "a2")
	// w1 finds b1 and u1: a's deliveries are w0's.
	k1 := collect(w1, 10, "b1", "u1")
	put("a4", "a") // to w0, which holds a
	put("c1", "c")
	ls.done(w1, k1)
	k1 = collect(w1, 10, "c1")
	ls.done(w1, k1)
	ls.done(w0, k0) // a is still w0's: a3 and a4 wait in its lane
	put("b2", "b")
	put("a5", "a")
	k0 = collect(w0, 3, "a3", "a4", "a5")
	k1 = collect(w1, 10, "b2")
	ls.done(w1, k1)
	put("a6", "a") // w0 holds a until it is done with a5
	if q, ok := ls.take(w1, fired(), false); ok {
		t.Fatalf("w1 took %s, held by w0", q.d.(*gateDelivery).id)
	}
	ls.done(w0, k0)
	k0 = collect(w0, 10, "a6")
	ls.done(w0, k0)
	put("a7", "a") // a is free: whichever worker is free takes it
	collect(w1, 10, "a7")
	put("x1", "")
	put("a8", "a")
	if got := laneIDs(ls.close()); !slices.Equal(got, []string{"x1", "a8"}) {
		t.Fatalf("close returned %v, want [x1 a8]", got)
	}
	if ds, _, ok := ls.collect(w0, 10, time.Millisecond); ok {
		t.Fatalf("collect after close: %v", laneIDs(ds))
	}
	if ls.put(ctx, &gateDelivery{id: "late"}) {
		t.Fatal("put after close accepted")
	}
}

// fired is a timeout that has passed.
func fired() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}

// A batch in which no handler returned for keyHoldLimit no longer holds
// back its keys: an idle worker takes over the deliveries queued behind it,
// and the key's next ones go to that worker. A handler returning restarts
// the count.
func TestKeyLanesStuckBatch(t *testing.T) {
	ls := newKeyLanes(2, 100)
	now := time.Unix(1000, 0)
	ls.now = func() time.Time { return now }
	ctx := context.Background()
	for _, id := range []string{"a1", "b1", "a2", "c1"} {
		ls.put(ctx, &gateDelivery{id: id, key: id[:1]})
	}
	w0, w1 := ls.all[0], ls.all[1]
	ds, k0, _ := ls.collect(w0, 2, time.Millisecond)
	if got := laneIDs(ds); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("w0 collected %v", got)
	}
	ds, k1, _ := ls.collect(w1, 10, time.Millisecond)
	if got := laneIDs(ds); !slices.Equal(got, []string{"b1", "c1"}) {
		t.Fatalf("w1 collected %v, want [b1 c1]", got)
	}
	ls.done(w1, k1)
	ls.put(ctx, &gateDelivery{id: "a3", key: "a"}) // behind w0's batch
	now = now.Add(keyHoldLimit - time.Millisecond)
	ls.progress(w0)
	now = now.Add(keyHoldLimit - time.Millisecond)
	if q, ok := ls.take(w1, fired(), false); ok {
		t.Fatalf("w1 took %s while w0's batch progresses", q.d.(*gateDelivery).id)
	}
	now = now.Add(time.Millisecond)
	ds, k1, _ = ls.collect(w1, 10, time.Millisecond)
	if got := laneIDs(ds); !slices.Equal(got, []string{"a3"}) {
		t.Fatalf("w1 collected %v past the limit, want [a3]", got)
	}
	ls.put(ctx, &gateDelivery{id: "a4", key: "a"})
	ls.done(w0, k0) // w0 is done with a1 and a2; a is w1's now
	if q, ok := ls.take(w0, fired(), false); ok {
		t.Fatalf("w0 took %s: a is w1's", q.d.(*gateDelivery).id)
	}
	ls.done(w1, k1)
	ds, _, _ = ls.collect(w1, 10, time.Millisecond)
	if got := laneIDs(ds); !slices.Equal(got, []string{"a4"}) {
		t.Fatalf("w1 collected %v, want [a4]", got)
	}
}

// Workers collecting and finishing batches concurrently: no two ever hold
// one key at once, every delivery is taken once, and each key's deliveries
// are handled in arrival order.
func TestKeyLanesConcurrent(t *testing.T) {
	const workers, n = 4, 3000
	ls := newKeyLanes(workers, 64)
	var mu sync.Mutex
	active := map[string]int{} // key → worker in a batch with it
	last := map[string]int{}   // key → last sequence handled
	handled := 0
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				ds, keys, ok := ls.collect(ls.all[w], 1+r.IntN(8), 50*time.Microsecond)
				if !ok {
					return
				}
				mu.Lock()
				for i, d := range ds {
					k := keys[i]
					var seq int
					fmt.Sscanf(d.(*gateDelivery).id, "%d", &seq)
					if k == "" {
						handled++
						continue
					}
					if o, ok := active[k]; ok && o != w {
						report(fmt.Errorf("key %s in the batches of workers %d and %d at once", k, o, w))
					}
					if seq <= last[k] {
						report(fmt.Errorf("key %s: delivery %d after %d", k, seq, last[k]))
					}
					active[k], last[k] = w, seq
					handled++
				}
				mu.Unlock()
				time.Sleep(time.Duration(r.IntN(100)) * time.Microsecond)
				mu.Lock()
				for _, k := range keys {
					delete(active, k)
				}
				mu.Unlock()
				ls.done(ls.all[w], keys)
			}
		}()
	}
	r := rand.New(rand.NewPCG(9, 9))
	for i := 1; i <= n; i++ {
		key := ""
		if r.IntN(10) > 0 {
			key = fmt.Sprintf("k%d", r.IntN(6))
		}
		ls.put(context.Background(), &gateDelivery{id: fmt.Sprint(i), key: key})
	}
	for {
		mu.Lock()
		h := handled
		mu.Unlock()
		if h == n {
			break
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(time.Millisecond):
		}
	}
	if rest := ls.close(); len(rest) != 0 {
		t.Fatalf("%d deliveries left queued", len(rest))
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// seqDelivery is a gateDelivery with a stream sequence (StreamSequencer).
type seqDelivery struct {
	gateDelivery
	seq uint64
}

func (d *seqDelivery) StreamSequence() uint64 { return d.seq }

// unwrapped is a wrapper such as the keep-alive's.
type unwrapped struct{ txbox.Delivery }

func (u unwrapped) Unwrap() txbox.Delivery { return u.Delivery }

// A batch runs each key's deliveries in stream order where the broker says
// it, in the places the key's deliveries hold: a message redelivered after
// a kill, arriving behind its key's later messages, runs before them.
// Unkeyed deliveries, other keys' and keys with a delivery of unknown
// sequence keep their arrival order.
func TestKeyLanesStreamOrder(t *testing.T) {
	ls := newKeyLanes(1, 100)
	ctx := context.Background()
	put := func(d txbox.Delivery) {
		t.Helper()
		if !ls.put(ctx, d) {
			t.Fatal("put refused")
		}
	}
	seq := func(id, key string, s uint64) txbox.Delivery {
		return unwrapped{&seqDelivery{gateDelivery{id: id, key: key}, s}}
	}
	put(seq("a3", "a", 30))
	put(seq("b2", "b", 21))
	put(seq("a4", "a", 40))
	put(seq("u9", "", 90))
	put(seq("u1", "", 10))
	put(seq("a2", "a", 20)) // redelivered: behind its key's later ones
	put(seq("b1", "b", 11))
	put(&gateDelivery{id: "c2", key: "c"}) // no sequence: c keeps arrival order
	put(seq("c1", "c", 12))
	ds, _, ok := ls.collect(ls.all[0], 10, time.Millisecond)
	var ids []string
	for _, d := range ds {
		if u, isWrapped := d.(unwrapped); isWrapped {
			d = u.Delivery
		}
		switch d := d.(type) {
		case *seqDelivery:
			ids = append(ids, d.id)
		case *gateDelivery:
			ids = append(ids, d.id)
		}
	}
	// The worker takes a3 and with it key a (a4, a2 join its lane), then
	// its lane first, then the shared queue: a3 a4 a2 b2 b1 u9 u1 c2 c1
	// as they arrive.
	want := []string{"a2", "a3", "a4", "b1", "b2", "u9", "u1", "c2", "c1"}
	if !ok || !slices.Equal(ids, want) {
		t.Fatalf("batch %v (ok %v), want %v", ids, ok, want)
	}
}
