package relay_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// produce adds messages for keys k0..k<keys-1>, a few per transaction,
// until stop is closed; the returned func waits for it to end.
func produce(t *testing.T, a *keyedAdder, keys int, stop chan struct{}) func() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			a.add(t, "k"+strconv.Itoa(i%keys), "k"+strconv.Itoa((i*7+3)%keys), "k"+strconv.Itoa((i*13+5)%keys))
			time.Sleep(time.Millisecond)
		}
	}()
	return wg.Wait
}

func stopRelay(t *testing.T, r *relay.Relay) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Must(t, r.Stop(ctx), "stop")
}

// Relays joining, leaving and dying share the 64 lanes: each takes its
// share, disjoint from the others'; a relay that stops hands its lanes
// over at once, one whose connections are cut loses them when its lease
// ends. Per-key order holds and nothing is lost meanwhile.
func TestLanesJoinLeaveDie(t *testing.T) {
	t.Parallel()
	eachLaneDialect(t, 8, testLanesJoinLeaveDie)
}

func testLanesJoinLeaveDie(t *testing.T, e laneEnv) {
	f := e.f
	log := &sendLog{}
	cfg := relaytest.With(relay.Config{PublishTimeout: 500 * time.Millisecond}, relaytest.Config{LaneLease: time.Second, ClaimLease: time.Second})
	a := e.laneRelay(t, nil, &logPublisher{name: "a", log: log}, cfg)
	b := e.laneRelay(t, nil, &logPublisher{name: "b", log: log}, cfg)
	proxy := testenv.NewProxy(t, e.target)
	c := e.laneRelay(t, proxy, &logPublisher{name: "c", log: log}, cfg)

	adder := &keyedAdder{f: f}
	stop := make(chan struct{})
	wait := produce(t, adder, 30, stop)

	startRelay(t, a)
	eventually(t, "a holds all 64 lanes", func() bool { return disjointCover(64, a) })
	startRelay(t, b)
	eventually(t, "a and b hold 32 lanes each", func() bool { return disjointCover(32, a, b) })
	startRelay(t, c)
	eventually(t, "a, b and c hold at most 22 lanes each", func() bool { return disjointCover(22, a, b, c) })
	sentC := log.sentBy("c")
	eventually(t, "c sends", func() bool { return log.sentBy("c") > sentC })

	stopRelay(t, b) // leaves: hands its lanes over
	eventually(t, "a and c hold 32 lanes each", func() bool { return disjointCover(32, a, c) })
	proxy.Cut() // c dies: its connections close, its leases run out
	eventually(t, "a holds all 64 lanes", func() bool { return disjointCover(64, a) })
	close(stop)
	wait()
	eventually(t, "all delivered", func() bool { return f.count(t, "published_at IS NULL") == 0 })
	dups := log.checkLanes(t, e, adder.want())
	t.Logf("%d keys, %d messages sent twice", len(adder.want()), dups)
}

// Two relays believe they own the same lanes: a's leases were taken over
// by b while a's batch is in flight (a stalled). b claims nothing from
// the lanes a's claim transaction read until it has ended; a's next claim, with
// its stale epochs, reads nothing from them.
func TestLanesTakeoverWaitsForTheOldOwner(t *testing.T) {
	t.Parallel()
	eachLaneDialect(t, 8, testLanesTakeoverWaitsForTheOldOwner)
}

func testLanesTakeoverWaitsForTheOldOwner(t *testing.T, e laneEnv) {
	f := e.f
	log := &sendLog{}
	gate := make(chan struct{})
	var blocked sync.Once
	inFlight := make(chan struct{})
	aPub := &logPublisher{name: "a", log: log, block: func(ctx context.Context) error {
		first := false
		blocked.Do(func() { first = true; close(inFlight) })
		if !first {
			return nil
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	// Long leases: a renews every 30s, so it keeps believing it holds
	// every lane while b joins, whatever the machine's speed.
	cfg := relaytest.With(relay.Config{PublishTimeout: 30 * time.Second, BatchSize: 50}, relaytest.Config{LaneLease: 10 * time.Minute, ClaimLease: 40 * time.Second})
	adder := &keyedAdder{f: f}
	for i := 0; i < 20; i++ {
		keys := make([]string, 40)
		for k := range keys {
			keys[k] = "k" + strconv.Itoa(k)
		}
		adder.add(t, keys...)
	}
	a := e.laneRelay(t, nil, aPub, cfg)
	startRelay(t, a)
	<-inFlight
	if len(testenv.RelayStats(a).Lanes) != 64 {
		t.Fatalf("a holds %d lanes", len(testenv.RelayStats(a).Lanes))
	}
	// a's leases end in the table (as if it had stalled past them); b
	// joins and takes half of the lanes over.
	f.exec(t, e.expire)
	b := e.laneRelay(t, nil, &logPublisher{name: "b", log: log}, cfg)
	startRelay(t, b)
	eventually(t, "b owns 32 lanes in the table", func() bool {
		n := 0
		for _, o := range laneOwners(t, e) {
			if o != "" && o != aOwner(t, e, a) {
				n++
			}
		}
		return n == 32
	})
	// b fences every 50ms while it waits: give it many tries.
	time.Sleep(500 * time.Millisecond)
	// b's fence passes only the lanes no claim transaction of a holds:
	// on PostgreSQL a's claims lock only the lanes with rows, so b may
	// take lanes that have none, never one with rows still pending (those
	// of a's batch in flight among them).
	got := testenv.RelayStats(b).Lanes
	pending := map[int]bool{}
	for _, r := range e.pairs(t, e.laneOf+" WHERE published_at IS NULL") {
		lane, err := strconv.Atoi(r[1])
		testenv.Must(t, err, "lane")
		pending[lane] = true
	}
	if len(pending) == 0 {
		t.Fatal("no row pending while a's batch is in flight")
	}
	for _, l := range got {
		if pending[l] {
			t.Fatalf("b claims from lane %d, which has rows pending, while a's batch is in flight (b's lanes %v)", l, got)
		}
	}
	if n := log.sentBy("b"); n != 0 {
		t.Fatalf("b sent %d messages while a's batch is in flight", n)
	}
	if len(testenv.RelayStats(a).Lanes) != 64 {
		t.Fatalf("a should still believe it holds 64 lanes, holds %d", len(testenv.RelayStats(a).Lanes))
	}
	close(gate)
	eventually(t, "b claims from its 32 lanes", func() bool { return len(testenv.RelayStats(b).Lanes) == 32 })
	eventually(t, "all delivered", func() bool { return f.count(t, "published_at IS NULL") == 0 })
	if log.sentBy("b") == 0 {
		t.Fatal("b sent nothing")
	}
	log.checkLanes(t, e, adder.want())
}

// aOwner returns the owner name of a's lanes: the owner of most lanes
// before b joined is a; here, any lane a claims from.
func aOwner(t *testing.T, e laneEnv, a *relay.Relay) string {
	ls := testenv.RelayStats(a).Lanes
	if len(ls) == 0 {
		return ""
	}
	return laneOwners(t, e)[int16(ls[0])]
}

// stallingPublisher is a logPublisher whose relay stalls, once armed,
// between a claim and its publish: CheckMessage, which the relay calls
// then, runs stall.
type stallingPublisher struct {
	*logPublisher
	armed atomic.Bool
	stall func()
}

func (p *stallingPublisher) CheckMessage(txbox.Message) error {
	if p.armed.CompareAndSwap(true, false) {
		p.stall()
	}
	return nil
}

// A relay stalls past its lease: every byte between it and PostgreSQL is
// held (a frozen host or network). The other relay takes its lanes over
// once the leases end and the server has ended the stalled claim
// transaction; when the stalled relay wakes, what it claimed before is not
// sent (it is older than its lease), and no lane ever has two senders nor
// a key a message after its successor. Two stalls fall wherever a's round
// is; the third is between a claim and its publish, where a relay that
// sent what it had claimed would send rows b has sent since, after their
// successors.
//
// PostgreSQL only: MySQL has no per-transaction idle timeout, so there b
// waits until a's connection thaws or ends (docs/guide/scaling.md).
func TestLanesStalledRelayPastItsLease(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	e := pgLanes(t, f)
	log := &sendLog{}
	cfg := relaytest.With(relay.Config{PublishTimeout: 300 * time.Millisecond, BatchSize: 20}, relaytest.Config{LaneLease: time.Second, ClaimLease: time.Second})
	fr := newFreezer(t)
	var b *relay.Relay
	aPub := &stallingPublisher{logPublisher: &logPublisher{name: "a", log: log}}
	aPub.stall = func() {
		fr.freeze()
		eventually(t, "b takes every lane over", func() bool { return len(testenv.RelayStats(b).Lanes) == 64 })
		sentB := log.sentBy("b")
		eventually(t, "b sends on", func() bool { return log.sentBy("b") > sentB+50 })
		fr.thaw()
	}
	a := e.laneRelay(t, fr, aPub, cfg)
	b = e.laneRelay(t, nil, &logPublisher{name: "b", log: log}, cfg)
	adder := &keyedAdder{f: f}
	stop := make(chan struct{})
	wait := produce(t, adder, 30, stop)
	startRelay(t, a)
	startRelay(t, b)
	eventually(t, "a and b hold 32 lanes each", func() bool { return disjointCover(32, a, b) })
	sentA := log.sentBy("a")
	eventually(t, "a sends", func() bool { return log.sentBy("a") > sentA })

	for i := 0; i < 3; i++ {
		sentA = log.sentBy("a")
		if i == 2 {
			aPub.armed.Store(true)
			eventually(t, "a stalled and woke", func() bool { return !aPub.armed.Load() })
		} else {
			fr.freeze()
			eventually(t, "b takes every lane over", func() bool { return len(testenv.RelayStats(b).Lanes) == 64 })
			sentB := log.sentBy("b")
			eventually(t, "b sends on", func() bool { return log.sentBy("b") > sentB+50 })
			fr.thaw()
		}
		eventually(t, "a and b share the lanes again", func() bool { return disjointCover(32, a, b) })
		eventually(t, "a sends again", func() bool { return log.sentBy("a") > sentA })
	}
	close(stop)
	wait()
	eventually(t, "all delivered", func() bool { return f.count(t, "published_at IS NULL") == 0 })
	dups := log.checkLanes(t, e, adder.want())
	t.Logf("%d keys, %d messages sent twice", len(adder.want()), dups)
}

// A relay dies in the middle of a batch: it sent the batch, and its
// connections are cut before the marks. Another relay takes its lanes over
// when the lease ends and sends the batch again (the duplicate window of
// docs/reference/guarantees.md) and everything after it, in order.
func TestLanesOwnerDiedMidBatch(t *testing.T) {
	t.Parallel()
	eachLaneDialect(t, 8, testLanesOwnerDiedMidBatch)
}

func testLanesOwnerDiedMidBatch(t *testing.T, e laneEnv) {
	f := e.f
	log := &sendLog{}
	dying := make(chan struct{})
	var once sync.Once
	aPub := &logPublisher{name: "a", log: log, block: func(ctx context.Context) error {
		once.Do(func() { close(dying) })
		<-ctx.Done() // never acknowledged: the relay dies first
		return ctx.Err()
	}}
	cfg := relaytest.With(relay.Config{PublishTimeout: 2 * time.Second, BatchSize: 50}, relaytest.Config{LaneLease: time.Second, ClaimLease: 3 * time.Second})
	adder := &keyedAdder{f: f}
	for i := 0; i < 10; i++ {
		keys := make([]string, 40)
		for k := range keys {
			keys[k] = "k" + strconv.Itoa(k)
		}
		adder.add(t, keys...)
	}
	proxy := testenv.NewProxy(t, e.target)
	a := e.laneRelay(t, proxy, aPub, cfg)
	startRelay(t, a)
	<-dying
	proxy.Cut() // a's claim transaction dies with its connection
	first := log.snapshot()[0]
	b := e.laneRelay(t, nil, &logPublisher{name: "b", log: log}, cfg)
	startRelay(t, b)
	eventually(t, "all delivered", func() bool { return f.count(t, "published_at IS NULL") == 0 })
	dups := log.checkLanes(t, e, adder.want())
	if dups < len(first.ids) {
		t.Fatalf("%d messages sent twice, want at least a's batch of %d", dups, len(first.ids))
	}
	if err := a.Err(); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("a: %v", err)
	}
}
