package relay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// One group drains the outbox tables of many PostgreSQL schemas of one
// database, a SQLite database and a MySQL database, through one shared
// JetStream publisher: every message of every store reaches the stream.
func TestGroupDrainsManyStores(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 6)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	pub := publisher(t, nc)

	tenants := pgTenants(t, pool, prefix, 10)
	tenants = append(tenants,
		sqlTenant(t, "sqlite", prefix+"sqlite", testenv.SQLite(t), txboxdriver.SQLite),
		sqlTenant(t, "mysql", prefix+"mysql", testenv.MySQL(t), txboxdriver.MySQL))

	var ev events
	g, err := relay.NewGroup(relay.GroupConfig{OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	want := map[string][]string{}
	for i, tn := range tenants {
		want[tn.name] = tn.add(t, 20+i*15) // some more than a batch of 100
		r := tn.newRelay(t, pub, relay.Config{PollInterval: 50 * time.Millisecond})
		testenv.Must(t, g.Add(context.Background(), relay.Store{Name: tn.name, Relay: r}), "add %s", tn.name)
	}
	if err := g.Add(context.Background(), relay.Store{Name: "pg00", Relay: tenants[1].newRelay(t, pub, relay.Config{})}); !errors.Is(err, relay.ErrDuplicateStore) {
		t.Fatalf("a second store named pg00: got %v, want ErrDuplicateStore", err)
	}
	runGroup(t, g)
	total := 0
	for _, ids := range want {
		total += len(ids)
	}
	eventually(t, "every store drained", func() bool {
		for _, tn := range tenants {
			if tn.pending(t) > 0 {
				return false
			}
		}
		return true
	})
	got := streamIDs(t, s, "Nats-Msg-Id")
	for name, ids := range want {
		for _, id := range ids {
			if got[id] != 1 {
				t.Fatalf("store %s: message %s is %d times in the stream, want once", name, id, got[id])
			}
		}
	}
	if len(got) != total {
		t.Fatalf("stream holds %d messages, want %d", len(got), total)
	}
	// The ten schemas share one pool, hence one budget; SQLite and MySQL
	// have one each.
	dbs := map[string]bool{}
	for _, e := range ev.snapshot() {
		dbs[e.Database] = true
		if e.Kind == relay.EventFinished && e.Err != nil {
			t.Errorf("store %s: round failed: %v", e.Store, e.Err)
		}
	}
	if len(dbs) != 3 {
		t.Fatalf("events name %d databases (%v), want 3: the schemas of one pool share a budget", len(dbs), dbs)
	}
}

// Stores join a running group and leave it: a store added while the group
// runs is drained; Remove waits for the store's round in flight, after
// which the group runs none of its rounds, nothing it claimed is lost, and
// the relay runs on its own.
func TestGroupAddRemoveWhileRunning(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 6)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	pub := publisher(t, nc)
	tn := pgTenants(t, pool, prefix, 2)
	a, b := tn[0], tn[1]

	var ev events
	g, err := relay.NewGroup(relay.GroupConfig{OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	runGroup(t, g)

	idsA := a.add(t, 5000)
	ra := a.newRelay(t, pub, relay.Config{BatchSize: 50, PollInterval: 20 * time.Millisecond})
	testenv.Must(t, g.Add(context.Background(), relay.Store{Name: a.name, Relay: ra}), "add a")
	idsB := b.add(t, 30)
	rb := b.newRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
	testenv.Must(t, g.Add(context.Background(), relay.Store{Name: b.name, Relay: rb}), "add b")

	eventually(t, "b drained, a under way", func() bool {
		return b.pending(t) == 0 && ev.count(relay.EventFinished, a.name, func(e relay.GroupEvent) bool { return e.Rows > 0 }) >= 3
	})
	if err := ra.Start(context.Background()); !errors.Is(err, relay.ErrAlreadyStarted) {
		t.Fatalf("Start of a relay in a group: got %v, want ErrAlreadyStarted", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testenv.Must(t, g.Remove(ctx, a.name), "remove a")
	if err := g.Remove(ctx, a.name); !errors.Is(err, relay.ErrUnknownStore) {
		t.Fatalf("second Remove: got %v, want ErrUnknownStore", err)
	}
	removedAt := len(ev.snapshot())
	left := a.pending(t)
	if left == 0 {
		t.Fatalf("store a drained before Remove: the test needs a larger backlog")
	}
	// Its round in flight finished before Remove returned: no row of a
	// is claimed (locked) now, and the group starts no round of a.
	var locked int64
	testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM "+a.table+" WHERE published_at IS NULL FOR UPDATE SKIP LOCKED) x").Scan(&locked), "locked")
	if locked != left {
		t.Fatalf("after Remove %d of a's %d pending rows are still locked by a claim", left-locked, left)
	}
	b.add(t, 3)
	g.Wake(b.name)
	eventually(t, "b drained again", func() bool { return b.pending(t) == 0 })
	for _, e := range ev.snapshot()[removedAt:] {
		if e.Store == a.name {
			t.Fatalf("event %v of removed store a", e)
		}
	}
	if a.pending(t) != left {
		t.Fatalf("a's pending rows went from %d to %d after Remove", left, a.pending(t))
	}
	// The relay, out of the group, drains the rest on its own.
	startRelay(t, ra)
	eventually(t, "a drained by its own relay", func() bool { return a.pending(t) == 0 })
	got := streamIDs(t, s, "Nats-Msg-Id")
	for _, id := range append(idsA, idsB...) {
		if got[id] == 0 {
			t.Fatalf("message %s was lost", id)
		}
	}
}

// A store with a large backlog delays another store's single row by at
// most one round: once the other store is queued, the backlog's store
// starts no round before it. Asserted on the order of the group's events,
// with a budget of one round at a time, so the rounds are a sequence.
func TestGroupFairness(t *testing.T) {
	t.Parallel()
	tn, pub, _ := pgGroup(t, 4, 2)
	big, small := tn[0], tn[1]
	for range 10 {
		big.add(t, 1000)
	}

	// big's third publish waits until small's row is queued, so that the
	// race between the test and big's drain cannot decide the outcome.
	gate := &gatedPublisher{Publisher: pub, n: 3, holding: make(chan struct{}), release: make(chan struct{})}
	var ev events
	g, err := relay.NewGroup(relay.GroupConfig{DatabaseBudget: 1, OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	testenv.Must(t, g.Add(context.Background(), relay.Store{Name: big.name, Relay: big.newRelay(t, gate, relay.Config{BatchSize: 100})}), "add big")
	testenv.Must(t, g.Add(context.Background(), relay.Store{Name: small.name, Relay: small.newRelay(t, pub, relay.Config{PollInterval: time.Hour})}), "add small")
	runGroup(t, g)

	bigRounds := func() int {
		return ev.count(relay.EventFinished, big.name, func(e relay.GroupEvent) bool { return e.Rows > 0 })
	}
	select {
	case <-gate.holding: // big's third round is publishing, holding the budget of 1
	case <-time.After(time.Minute):
		t.Fatal("big's third round never published")
	}
	small.add(t, 1)
	g.Wake(small.name)                          // no poll for an hour: only Wake queues it
	eventually(t, "small queued", func() bool { // queued, not started: big holds the budget
		return ev.count(relay.EventQueued, small.name, nil) > ev.count(relay.EventStarted, small.name, nil)
	})
	close(gate.release)
	eventually(t, "small's row delivered", func() bool {
		return ev.count(relay.EventFinished, small.name, func(e relay.GroupEvent) bool { return e.Rows == 1 }) == 1
	})
	if big.pending(t) == 0 {
		t.Fatalf("big's backlog drained before small's row went")
	}
	all := ev.snapshot()
	queued, started, delivered := -1, -1, -1
	for i, e := range all {
		switch {
		case e.Store != small.name:
		case e.Kind == relay.EventQueued && delivered < 0:
			queued = i
		case e.Kind == relay.EventStarted && started < queued:
			started = i
		case e.Kind == relay.EventFinished && e.Rows == 1:
			delivered = i
		}
	}
	if queued < 0 || started < queued || delivered < started {
		t.Fatalf("events out of order: queued %d, started %d, delivered %d", queued, started, delivered)
	}
	bigStarts := 0
	for _, e := range all[queued:started] {
		if e.Store == big.name && e.Kind == relay.EventStarted {
			bigStarts++
		}
		if e.Busy > 1 {
			t.Fatalf("budget 1 exceeded: %+v", e)
		}
	}
	if bigStarts > 1 {
		t.Fatalf("big started %d rounds between small's queueing and its round, want at most 1", bigStarts)
	}
	t.Logf("big rounds started between small queued and small started: %d; big rounds before small's row: %d of 100", bigStarts, bigRounds())
}

// A store whose database is down and one whose table was dropped do not
// stall the others: the healthy store delivers all its rows while the
// failing ones fail round after round, and the one whose database comes
// back drains.
func TestGroupFailingStoresDoNotStallOthers(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 4)
	downPool, proxy, _ := testenv.PostgresThrough(t, 4)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	pub := publisher(t, nc)
	tn := pgTenants(t, pool, prefix, 2)
	ok, gone := tn[0], tn[1]
	ok.name, gone.name = "ok", "gone"
	down := pgTenants(t, downPool, prefix+"down", 1)[0]
	down.name = "down"

	var ev events
	g, err := relay.NewGroup(relay.GroupConfig{OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	cfg := relaytest.With(relay.Config{PollInterval: 20 * time.Millisecond, PublishTimeout: 2 * time.Second}, relaytest.Config{BackoffMax: 200 * time.Millisecond})
	for _, x := range []tenant{ok, gone, down} {
		testenv.Must(t, g.Add(context.Background(), relay.Store{Name: x.name, Relay: x.newRelay(t, pub, cfg)}), "add %s", x.name)
	}
	downIDs := down.add(t, 40)
	proxy.Cut()
	gone.exec(t, "DROP TABLE %s")
	runGroup(t, g)

	failed := func(name string) int {
		return ev.count(relay.EventFinished, name, func(e relay.GroupEvent) bool { return e.Err != nil })
	}
	eventually(t, "both failing stores failed twice", func() bool { return failed("down") >= 2 && failed("gone") >= 2 })
	var okIDs []string
	for range 5 {
		okIDs = append(okIDs, ok.add(t, 30)...)
		g.Wake(ok.name)
	}
	eventually(t, "ok drained while the others fail", func() bool { return ok.pending(t) == 0 })
	if failed("down") < 2 || failed("gone") < 2 {
		t.Fatalf("failing stores stopped failing")
	}
	proxy.Resume()
	eventually(t, "down drained once its database is back", func() bool { return down.pending(t) == 0 })
	got := streamIDs(t, s, "Nats-Msg-Id")
	for _, id := range append(okIDs, downIDs...) {
		if got[id] == 0 {
			t.Fatalf("message %s not delivered", id)
		}
	}
}

// countingPublisher passes batches on to a real publisher and records how
// many Publish calls run at once; the first calls wait (up to a minute)
// until budget of them run together, so that the test sees the budget
// reached, not only never exceeded.
type countingPublisher struct {
	txbox.Publisher
	budget        int
	now, max      atomic.Int64
	mu            sync.Mutex
	reached       chan struct{}
	reachedClosed bool
}

func (p *countingPublisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	n := p.now.Add(1)
	defer p.now.Add(-1)
	for {
		m := p.max.Load()
		if n <= m || p.max.CompareAndSwap(m, n) {
			break
		}
	}
	if n >= int64(p.budget) {
		p.mu.Lock()
		if !p.reachedClosed {
			close(p.reached)
			p.reachedClosed = true
		}
		p.mu.Unlock()
	}
	select {
	case <-p.reached:
	case <-time.After(time.Minute):
	}
	return p.Publisher.Publish(ctx, msgs)
}

// The stores of one database never run more rounds at once than its
// budget (each round holds a claim transaction, a connection, while it
// publishes), and do reach it; a second database has a budget of its own.
func TestGroupDatabaseBudget(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 8)
	other, _ := testenv.Postgres(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	stream(t, nc, prefix, jetstream.StreamConfig{})
	inner := publisher(t, nc)
	const budget = 2
	pubA := &countingPublisher{Publisher: inner, budget: budget, reached: make(chan struct{})}
	pubB := &countingPublisher{Publisher: inner, budget: budget, reached: make(chan struct{})}

	var ev events
	g, err := relay.NewGroup(relay.GroupConfig{DatabaseBudget: budget, OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	var all []tenant
	for _, x := range []struct {
		pub *countingPublisher
		tns []tenant
	}{{pubA, pgTenants(t, pool, prefix+"a", 6)}, {pubB, pgTenants(t, other, prefix+"b", 3)}} {
		for _, tn := range x.tns {
			tn.add(t, 300)
			r := tn.newRelay(t, x.pub, relay.Config{BatchSize: 50})
			testenv.Must(t, g.Add(context.Background(), relay.Store{Name: tn.topic, Relay: r}), "add")
			all = append(all, tn)
		}
	}
	runGroup(t, g)
	eventually(t, "all drained", func() bool {
		for _, tn := range all {
			if tn.pending(t) > 0 {
				return false
			}
		}
		return true
	})
	if pubA.max.Load() != budget || pubB.max.Load() != budget {
		t.Fatalf("most rounds publishing at once: %d on the first database, %d on the second; want %d each", pubA.max.Load(), pubB.max.Load(), budget)
	}
	for _, e := range ev.snapshot() {
		if e.Busy > budget {
			t.Fatalf("event over budget: %+v", e)
		}
	}
}

// gatedPublisher holds its nth Publish until release is closed, and closes
// holding when it starts to wait.
type gatedPublisher struct {
	txbox.Publisher
	n       int32
	calls   atomic.Int32
	holding chan struct{}
	release chan struct{}
}

func (p *gatedPublisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	if p.calls.Add(1) == p.n {
		close(p.holding)
		<-p.release
	}
	return p.Publisher.Publish(ctx, msgs)
}

// Stores that share a publisher count only their own broker duplicates:
// the broker already held three of store a's messages (a relay died
// between publish and mark), none of store b's.
func TestGroupCountsDuplicatesPerStore(t *testing.T) {
	t.Parallel()
	tn, pub, _ := pgGroup(t, 4, 2)
	a, b := tn[0], tn[1]
	ids := a.add(t, 5)
	b.add(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := msgs(a.topic, 3)
	for i := range held {
		held[i].ID = ids[i]
	}
	if errs := pub.Publish(ctx, held); errs != nil {
		t.Fatalf("publish the copies the broker holds: %v", errs)
	}

	g, err := relay.NewGroup(relay.GroupConfig{})
	testenv.Must(t, err, "NewGroup")
	ra := a.newRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
	rb := b.newRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
	testenv.Must(t, g.Add(ctx, relay.Store{Name: a.name, Relay: ra}), "add a")
	testenv.Must(t, g.Add(ctx, relay.Store{Name: b.name, Relay: rb}), "add b")
	runGroup(t, g)
	// A round counts what it published once its marks committed: the
	// rows are marked a moment before the counters say so.
	eventually(t, "both stores drained and counted", func() bool {
		return a.pending(t) == 0 && b.pending(t) == 0 && testenv.RelayStats(ra).Published >= 5 && testenv.RelayStats(rb).Published >= 5
	})
	if sa, sb := testenv.RelayStats(ra), testenv.RelayStats(rb); sa.Duplicates != 3 || sa.Published != 5 || sb.Duplicates != 0 || sb.Published != 5 {
		t.Fatalf("store a: %d duplicates of %d published, store b: %d of %d; want 3 of 5 and 0 of 5",
			sa.Duplicates, sa.Published, sb.Duplicates, sb.Published)
	}
}

// A Group has a relay's lifecycle: Stopped is closed before Start and
// after Stop, a second Start while it runs is ErrAlreadyStarted (and so is
// starting a relay the group runs), Err is nil after a Stop, and a group
// stopped starts again and delivers what was committed meanwhile.
func TestGroupStartStop(t *testing.T) {
	t.Parallel()
	tn, pub, _ := pgGroup(t, 4, 2)
	ctx := context.Background()
	g, err := relay.NewGroup(relay.GroupConfig{})
	testenv.Must(t, err, "NewGroup")
	var relays []*relay.Relay
	for _, tt := range tn {
		r := tt.newRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
		relays = append(relays, r)
		testenv.Must(t, g.Add(ctx, relay.Store{Name: tt.name, Relay: r}), "add %s", tt.name)
	}
	select {
	case <-g.Stopped():
	default:
		t.Fatal("Stopped is open before Start")
	}
	for cycle := range 2 {
		for _, tt := range tn {
			tt.add(t, 5)
		}
		testenv.Must(t, g.Start(ctx), "start %d", cycle)
		if err := g.Start(ctx); !errors.Is(err, relay.ErrAlreadyStarted) {
			t.Fatalf("second Start: %v, want ErrAlreadyStarted", err)
		}
		if err := relays[0].Start(ctx); !errors.Is(err, relay.ErrAlreadyStarted) {
			t.Fatalf("Start of a relay the group runs: %v, want ErrAlreadyStarted", err)
		}
		select {
		case <-g.Stopped():
			t.Fatal("Stopped is closed while the group runs")
		default:
		}
		for _, tt := range tn {
			eventually(t, "delivered "+tt.name, func() bool { return tt.pending(t) == 0 })
		}
		testenv.Must(t, g.Stop(ctx), "stop %d", cycle)
		select {
		case <-g.Stopped():
		default:
			t.Fatal("Stopped is open after Stop")
		}
		if err := g.Err(); err != nil {
			t.Fatalf("Err after Stop: %v", err)
		}
		for _, r := range relays {
			if testenv.RelayStats(r).Running {
				t.Fatal("a store's relay says it runs after the group stopped")
			}
		}
	}
}
