package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// writers runs n goroutines that each commit txs transactions of one to
// three random keys, and waits for them.
func writers(t *testing.T, pool *pgxpool.Pool, n, txs int, keys []string) {
	t.Helper()
	writersWith(t, pool, txbox.Config{}, n, txs, keys)
}

// writersWith is writers with the outbox configured by ocfg.
func writersWith(t *testing.T, pool *pgxpool.Pool, ocfg txbox.Config, n, txs int, keys []string) {
	t.Helper()
	ob, err := txbox.New(txboxpgx.New(pool), ocfg)
	testenv.Must(t, err, "txbox.New")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for range txs {
				var ks []string
				for range 1 + rnd.IntN(3) {
					ks = append(ks, keys[rnd.IntN(len(keys))])
				}
				if err := writeTx(context.Background(), pool, ob, ks...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Eight writers commit concurrently (ids interleave out of commit order);
// the relay publishes every message once, each key in commit order, and
// confirms the slot up to the last commit.
func TestCommitOrderPerKey(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{BatchSize: 7}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	r := newRelay(t, pool, l, cfg)
	start(t, r)
	writers(t, pool, 8, 40, keysOf(10))
	delivered(t, l, pool)
	if dups := verdict(t, l.snapshot(), committed(t, pool)); dups != 0 {
		t.Fatalf("%d duplicates without any fault", dups)
	}
	// Every row was delivered: the slot confirms up to the last commit.
	confirmedPast(t, pool, cfg, "the last commit")
	// Delivered rows are not updated: the confirmed LSN is the mark.
	var marked int
	testenv.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM txbox_outbox WHERE published_at IS NOT NULL`).Scan(&marked), "marked")
	if marked != 0 {
		t.Fatalf("%d rows updated as published", marked)
	}
}

// While the broker is away nothing is confirmed past the first
// unacknowledged commit, whatever keepalives come: a relay that then stops
// leaves every message to the next one, which delivers them all, in order.
func TestOutageHoldsTheSlot(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	down := &ledger{}
	tries := make(chan struct{}, 1)
	down.setFail(func(txbox.Message) error {
		select {
		case tries <- struct{}{}:
		default:
		}
		return errors.New("broker unreachable")
	})
	a := newRelay(t, pool, down, cfg)
	start(t, a)
	writers(t, pool, 2, 10, keysOf(3))
	// WAL the relay may confirm on its own (it touches no outbox row),
	// and many status intervals (50ms) with the server's keepalives.
	_, err = pool.Exec(ctx, `CREATE TABLE other (x int); INSERT INTO other SELECT generate_series(1, 1000)`)
	testenv.Must(t, err, "other table")
	<-tries
	time.Sleep(time.Second)
	testenv.Must(t, a.Stop(ctx), "stop")
	if n := len(down.snapshot()); n != 0 {
		t.Fatalf("%d acknowledged by a broker that was down", n)
	}
	up := &ledger{}
	b := newRelay(t, pool, up, cfg)
	start(t, b)
	delivered(t, up, pool)
	verdict(t, up.snapshot(), committed(t, pool))
}

// Idle, or with only other tables' commits, the relay confirms the
// server's WAL position from its keepalives: the slot does not hold WAL.
func TestIdleStreamDoesNotPinWAL(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	r := newRelay(t, pool, l, cfg)
	start(t, r)
	writers(t, pool, 1, 5, keysOf(2))
	delivered(t, l, pool)
	_, err = pool.Exec(ctx, `CREATE TABLE other (x int); INSERT INTO other SELECT generate_series(1, 10000)`)
	testenv.Must(t, err, "other table")
	confirmedPast(t, pool, cfg, "the other table's writes")
}

// The server crashes (pg_ctl stop -m immediate) while writers commit and
// the relay streams; it comes back with crash recovery. The relay
// reconnects and delivers every committed message, each key in order;
// duplicates are allowed (the confirmed LSN is saved at checkpoints).
func TestServerCrash(t *testing.T) {
	t.Parallel()
	c, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{BatchSize: 20}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	r := newRelay(t, pool, l, cfg)
	start(t, r)
	keys := keysOf(8)
	writers(t, pool, 4, 30, keys)
	eventually(t, "some messages acknowledged", func() (bool, string) {
		n := len(l.snapshot())
		return n > 0, fmt.Sprint(n)
	})
	c.Crash()
	c.Start()
	pool.Reset() // the writers' connections died with the server
	writers(t, pool, 4, 30, keys)
	delivered(t, l, pool)
	dups := verdict(t, l.snapshot(), committed(t, pool))
	t.Logf("%d acknowledged, %d duplicates", len(l.snapshot()), dups)
	if st := statsOf(r); !st.Reading {
		t.Fatalf("the relay does not read after the restart: %+v", st)
	}
}

// Two relays on one slot: one reads, the other waits; when the reader
// stops, the standby takes over from the confirmed LSN and nothing is
// lost.
func TestLeaseTakeover(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{LeaseTimeout: 3 * time.Second}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	a := newRelay(t, pool, l, cfg)
	start(t, a)
	eventually(t, "relay a reads", func() (bool, string) { return statsOf(a).Reading, "" })
	b := newRelay(t, pool, l, cfg)
	start(t, b)
	keys := keysOf(4)
	writers(t, pool, 2, 20, keys)
	delivered(t, l, pool)
	if statsOf(b).Reading || statsOf(b).Published != 0 {
		t.Fatalf("the standby reads while the reader holds the lease: %+v", statsOf(b))
	}
	// Ready: the reader is, the standby is not and says why.
	if st, err := a.Stats(ctx); err != nil || st.Ready() != nil {
		t.Fatalf("the reader is not ready: %v, %v (%+v)", err, st.Ready(), st)
	}
	if err := statsOf(b).Ready(); err == nil || !strings.Contains(err.Error(), "standby") {
		t.Fatalf("the standby's Ready: %v, want an error naming the standby", err)
	}
	testenv.Must(t, a.Stop(ctx), "stop a")
	if err := statsOf(a).Ready(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("the stopped relay's Ready: %v, want an error saying it does not run", err)
	}
	eventually(t, "relay b takes over, ready", func() (bool, string) {
		st := statsOf(b)
		return st.Reading && st.Ready() == nil, fmt.Sprint(st.Ready())
	})
	writers(t, pool, 2, 20, keys)
	delivered(t, l, pool)
	verdict(t, l.snapshot(), committed(t, pool))
	if statsOf(b).Published == 0 {
		t.Fatal("the standby published nothing after the takeover")
	}
}

// A slot whose WAL the server removed (max_slot_wal_keep_size) is refused
// by Start with an error that says what was lost and what to do; so is a
// missing slot.
func TestRefusesLostSlot(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t, "max_slot_wal_keep_size=1MB", "max_wal_size=32MB", "min_wal_size=32MB")
	ctx := context.Background()
	cfg := cdc.Config{}
	err := newRelay(t, pool, &ledger{}, cfg).Start(ctx)
	if !errors.Is(err, cdc.ErrSlotMissing) || !strings.Contains(err.Error(), "txbox slot create") {
		t.Fatalf("missing slot: got %v", err)
	}
	_, err = cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	_, err = pool.Exec(ctx, `CREATE TABLE filler (x text)`)
	testenv.Must(t, err, "filler")
	eventually(t, "the slot lost", func() (bool, string) {
		_, err := pool.Exec(ctx, `INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 2000)`)
		testenv.Must(t, err, "fill")
		_, err = pool.Exec(ctx, `SELECT pg_switch_wal()`)
		testenv.Must(t, err, "switch wal")
		_, err = pool.Exec(ctx, `CHECKPOINT`)
		testenv.Must(t, err, "checkpoint")
		st := slot(t, pool, cfg)
		return st.Lost() != "", fmt.Sprintf("wal_status %s, safe_wal_size %d", st.WALStatus, st.SafeWALSize)
	})
	err = newRelay(t, pool, &ledger{}, cfg).Start(ctx)
	if !errors.Is(err, cdc.ErrSlotLost) {
		t.Fatalf("lost slot: got %v", err)
	}
	for _, want := range []string{"lost", "confirmed LSN", "txbox slot drop", "max_slot_wal_keep_size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// Publishes that fail part-way (a transient error or a rejection on a
// message's first try, one message in five) are published again from the
// first failed message on: every key's messages still reach the broker in
// commit order, none lost.
func TestPartialFailuresKeepOrder(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{BatchSize: 16}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	tried := map[string]int{}
	var mu sync.Mutex
	l.setFail(func(m txbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		tried[m.ID]++
		if tried[m.ID] == 1 && len(tried)%5 == 0 {
			if len(tried)%10 == 0 {
				return txbox.Reject(errors.New("refused once"))
			}
			return errors.New("timeout")
		}
		return nil
	})
	start(t, newRelay(t, pool, l, cfg))
	writers(t, pool, 4, 30, keysOf(6))
	delivered(t, l, pool)
	verdict(t, l.snapshot(), committed(t, pool))
}

// A message the broker always rejects is recorded dead after MaxAttempts
// (dead_at, last_error, attempts on its row), and everything else is
// delivered, each key in order.
func TestRejectedToDead(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{MaxAttempts: 3}
	l, r := poisoned(t, pool, cfg, "k01:3", "poison")
	writers(t, pool, 2, 20, keysOf(3))
	var attempts int
	var lastErr string
	eventually(t, "the poison message recorded dead", func() (bool, string) {
		err := pool.QueryRow(ctx, `SELECT attempts, last_error FROM txbox_outbox WHERE payload = 'k01:3' AND dead_at IS NOT NULL`).Scan(&attempts, &lastErr)
		return err == nil, fmt.Sprintf("%v; %s", err, progress(r, l))
	})
	if attempts != 3 || !strings.Contains(lastErr, "poison") {
		t.Fatalf("dead row: attempts %d, last_error %q", attempts, lastErr)
	}
	othersDelivered(t, l, pool)
	seen := map[string]int{}
	for _, m := range l.snapshot() {
		k, ns, _ := strings.Cut(string(m.Payload), ":")
		n, _ := strconv.Atoi(ns)
		if n <= seen[k] {
			t.Fatalf("order or duplicate: %s after %s:%d", m.Payload, k, seen[k])
		}
		seen[k] = n
	}
	if st := statsOf(r); st.Dead != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// A key whose message the broker keeps rejecting is parked: its later
// messages wait, every other key's messages are delivered meanwhile (past
// many batches). Once the broker takes the message, the parked key goes
// on in order and the slot is confirmed past it.
func TestRejectedKeyParksAlone(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	cfg := cdc.Config{BatchSize: 5, MaxAttempts: 1 << 20}
	l, r := poisoned(t, pool, cfg, "k01:2", "poison for now")
	writers(t, pool, 2, 30, keysOf(4))
	want := committed(t, pool)
	others := 0
	for k, n := range want {
		if k != "k01" {
			others += n
		}
	}
	eventually(t, "the other keys delivered past the parked one", func() (bool, string) {
		n := 0
		for _, m := range l.snapshot() {
			if !strings.HasPrefix(string(m.Payload), "k01:") {
				n++
			}
		}
		return n >= others, fmt.Sprintf("%d of %d", n, others)
	})
	for _, m := range l.snapshot() {
		if k, ns, _ := strings.Cut(string(m.Payload), ":"); k == "k01" && ns != "1" {
			t.Fatalf("%s delivered while k01:2 is parked", m.Payload)
		}
	}
	l.setFail(nil)
	delivered(t, l, pool)
	verdict(t, l.snapshot(), want)
	if st := statsOf(r); st.Dead != 0 {
		t.Fatalf("stats: %+v", st)
	}
	confirmedPast(t, pool, cfg, "the parked key's release")
}

// A dead row that `txbox dead redrive` makes pending again (an UPDATE,
// which the insert-only stream does not carry) is published by the
// reading relay's redrive poll, once, and marked published_at. Its key's
// later messages went on when it died, so it reaches the broker after
// them: per-key order does not hold across a redrive.
func TestRedriveRepublishes(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{MaxAttempts: 2, RedriveInterval: 50 * time.Millisecond}
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	poison := func(m txbox.Message) error {
		if string(m.Payload) == "k01:2" {
			return txbox.Reject(errors.New("poison"))
		}
		return nil
	}
	l.setFail(poison)
	r := newRelay(t, pool, l, cfg)
	start(t, r)
	writers(t, pool, 2, 20, keysOf(3))
	letters, err := dead.New(txboxpgx.New(pool), txbox.Config{})
	testenv.Must(t, err, "dead.New")
	var deadList []dead.Message
	eventually(t, "the poison message in the dead list", func() (bool, string) {
		deadList, err = letters.List(ctx, 10)
		testenv.Must(t, err, "dead list")
		return len(deadList) == 1, fmt.Sprintf("%d dead listed; %s", len(deadList), progress(r, l))
	})
	othersDelivered(t, l, pool)
	// Redriven while the broker still rejects it: dead again, one more
	// attempt on the count.
	n, err := letters.Redrive(ctx)
	testenv.Must(t, err, "redrive")
	if n != 1 {
		t.Fatalf("redrove %d", n)
	}
	eventually(t, "the redriven poison dead again", func() (bool, string) {
		var attempts int
		err := pool.QueryRow(ctx, `SELECT attempts FROM txbox_outbox WHERE payload = 'k01:2' AND dead_at IS NOT NULL`).Scan(&attempts)
		return err == nil && attempts == 1, fmt.Sprintf("attempts %d (%v); %s", attempts, err, progress(r, l))
	})
	l.setFail(nil)
	_, err = letters.Redrive(ctx)
	testenv.Must(t, err, "redrive")
	delivered(t, l, pool)
	acked := l.snapshot()
	if last := acked[len(acked)-1]; string(last.Payload) != "k01:2" {
		t.Fatalf("the last acknowledged is %s, not the redriven k01:2", last.Payload)
	}
	// The broker acknowledges before the relay marks the row: wait for the mark.
	eventually(t, "the redriven row marked published_at", func() (bool, string) {
		var published bool
		testenv.Must(t, pool.QueryRow(ctx, `SELECT published_at IS NOT NULL FROM txbox_outbox WHERE payload = 'k01:2'`).Scan(&published), "published_at")
		return published, fmt.Sprint(published)
	})
	time.Sleep(200 * time.Millisecond) // several redrive polls: none publishes it again
	if got := len(l.snapshot()); got != len(acked) {
		t.Fatalf("%d acknowledged after the redrive settled, %d before", got, len(acked))
	}
	if st := statsOf(r); st.Dead != 2 {
		t.Fatalf("stats: %+v", st)
	}
}

// holding is a publisher that records its calls and holds each until
// the test releases them; it notes any key that was in two calls at once.
type holding struct {
	mu       sync.Mutex
	inFlight int
	most     int // the most calls in flight at once
	keys     map[string]int
	twice    []string // keys that were in two calls at once
	release  chan struct{}
	ledger
}

func (h *holding) Publish(ctx context.Context, msgs []txbox.Message) []error {
	h.mu.Lock()
	h.inFlight++
	h.most = max(h.most, h.inFlight)
	for _, m := range msgs {
		if m.Key == "" {
			continue
		}
		if h.keys[m.Key] > 0 {
			h.twice = append(h.twice, m.Key)
		}
		h.keys[m.Key]++
	}
	release := h.release
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inFlight--
		for _, m := range msgs {
			if m.Key != "" {
				h.keys[m.Key]--
			}
		}
		h.mu.Unlock()
	}()
	select {
	case <-release:
		return h.ledger.Publish(ctx, msgs)
	case <-ctx.Done():
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
}

func (h *holding) state() (inFlight, most int, twice []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight, h.most, append([]string(nil), h.twice...)
}

// While the broker has not answered a publish, the relay sends the next
// messages in another, unless their key has a message in the one in
// flight: that key's next message waits for the answer.
func TestPublishesOverlap(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{PublishTimeout: time.Hour} // a publish ends when the test releases it
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	h := &holding{keys: map[string]int{}, release: make(chan struct{})}
	r := newRelay(t, pool, h, cfg)
	start(t, r)
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(releaseAll) // before the relay's stop, which waits for the publishes
	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	add := func(tx int) {
		t.Helper()
		msgs := []txbox.Message{{Topic: "cdc.test", Payload: []byte(fmt.Sprintf("u:%d", tx))},
			{Topic: "cdc.test", Key: "k", Payload: []byte(fmt.Sprintf("k:%d", tx))}}
		testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, msgs...)), "add")
	}
	add(1)
	eventually(t, "the first publish in flight", func() (bool, string) {
		n, _, _ := h.state()
		return n == 1, fmt.Sprintf("%d in flight", n)
	})
	add(2)
	eventually(t, "a second publish beside the first", func() (bool, string) {
		_, most, _ := h.state()
		return most >= 2, fmt.Sprintf("at most %d in flight", most)
	})
	releaseAll()
	eventually(t, "all four delivered", func() (bool, string) {
		n := len(h.snapshot())
		return n == 4, fmt.Sprintf("%d of 4", n)
	})
	if _, _, twice := h.state(); len(twice) > 0 {
		t.Fatalf("keys in two publishes at once: %v", twice)
	}
	var ks []string
	for _, m := range h.snapshot() {
		if m.Key == "k" {
			ks = append(ks, string(m.Payload))
		}
	}
	if strings.Join(ks, " ") != "k:1 k:2" {
		t.Fatalf("key k delivered as %v, committed k:1 k:2", ks)
	}
}

// gated is a publisher that holds each publish carrying a message of key
// held until the test opens the gate, and answers the others at once;
// fail, when set, decides a message's error (as ledger's).
type gated struct {
	held string
	gate chan struct{}
	mu   sync.Mutex
	wait int // publishes held now
	ledger
}

func (g *gated) Publish(ctx context.Context, msgs []txbox.Message) []error {
	for _, m := range msgs {
		if m.Key != g.held {
			continue
		}
		g.mu.Lock()
		g.wait++
		g.mu.Unlock()
		<-g.gate
		g.mu.Lock()
		g.wait--
		g.mu.Unlock()
		break
	}
	return g.ledger.Publish(ctx, msgs)
}

func (g *gated) holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wait
}

// A message the broker rejects while another publish is in flight is
// retried and recorded dead without waiting for that publish, and its
// key's next message goes on; the slot is confirmed past both once the
// held publish is answered.
func TestRejectedBesidePublishInFlight(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t)
	ctx := context.Background()
	cfg := cdc.Config{MaxAttempts: 2, PublishTimeout: time.Hour} // the held publish ends when the test opens the gate
	_, err := cdc.CreateSlot(ctx, pool, cfg)
	testenv.Must(t, err, "create slot")
	g := &gated{held: "h", gate: make(chan struct{})}
	g.setFail(rejecting("p:1", "poison"))
	r := newRelay(t, pool, g, cfg)
	start(t, r)
	var once sync.Once
	open := func() { once.Do(func() { close(g.gate) }) }
	t.Cleanup(open) // before the relay's stop, which waits for the publishes
	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	add := func(key, payload string) {
		t.Helper()
		testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "cdc.test", Key: key, Payload: []byte(payload)})), "add")
	}
	add("h", "h:1")
	eventually(t, "the publish of h:1 in flight", func() (bool, string) {
		n := g.holding()
		return n == 1, fmt.Sprintf("%d held", n)
	})
	add("p", "p:1")
	add("p", "p:2")
	eventually(t, "p:1 recorded dead and p:2 delivered while h:1 is in flight", func() (bool, string) {
		var attempts int
		err := pool.QueryRow(ctx, `SELECT attempts FROM txbox_outbox WHERE payload = 'p:1' AND dead_at IS NOT NULL`).Scan(&attempts)
		var got []string
		for _, m := range g.snapshot() {
			got = append(got, string(m.Payload))
		}
		return err == nil && slices.Equal(got, []string{"p:2"}), fmt.Sprintf("attempts %d (%v), acknowledged %v; %s", attempts, err, got, progress(r, &g.ledger))
	})
	if n := g.holding(); n != 1 {
		t.Fatalf("%d publishes held, want h:1's", n)
	}
	open()
	eventually(t, "h:1 delivered", func() (bool, string) {
		n := len(g.snapshot())
		return n == 2, fmt.Sprintf("%d of 2", n)
	})
	confirmedPast(t, pool, cfg, "the dead p:1 and the held h:1")
	if st := statsOf(r); st.Dead != 1 || st.Published != 2 {
		t.Fatalf("stats: %+v", st)
	}
}
