// Package drivertest is the conformance suite of txbox's database drivers:
// every driver that txbox ships runs it in CI, and a third-party driver —
// an implementation of driver.Driver for another database library — runs
// it too, from its own tests:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Exercise(t, func(t *testing.T) driver.Driver[*sql.Tx] {
//			return mydriver.New(openFreshDatabase(t)) // empty, isolated, closed by t.Cleanup
//		})
//	}
//
// It drives the driver only through txbox's public packages — migrate,
// txbox (Outbox.Add), relay, dead and inbox — with a recording publisher in
// place of a broker, so a pass means that those packages work on the
// driver: migrations apply and re-apply as a no-op; added messages are
// claimed, published, marked, retried, parked as dead, redriven, discarded
// and cleaned up; per-key order holds; N relays on one table publish each
// message once; the inbox's insert-first receipt runs a handler once for
// many concurrent copies of a message.
//
// newDriver is called once per subtest, and subtests run in parallel: each
// call must return a driver on a fresh, empty database (or schema) of its
// own, with room for at least 8 concurrent connections, released by
// t.Cleanup. The suite needs no service but the database.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dead"
	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/migrate"
	"github.com/txbox/txbox/relay"
)

// Options adapts the suite to a driver. The zero value suits a database
// that accepts concurrent writers.
type Options struct {
	// Relays is how many relays the concurrency test runs side by side on
	// one table. Default: 4.
	Relays int
	// Copies is how many concurrent copies of one message the inbox
	// concurrency test handles. Default: 16.
	Copies int
}

// Option changes Options.
type Option func(*Options)

// WithOptions replaces the suite's options.
func WithOptions(o Options) Option { return func(p *Options) { *p = o } }

// Exercise runs the conformance suite against the driver newDriver returns,
// as parallel subtests of t. See the package documentation for what
// newDriver must provide.
func Exercise[TTx any](t *testing.T, newDriver func(t *testing.T) driver.Driver[TTx], opts ...Option) {
	t.Helper()
	o := Options{}
	for _, f := range opts {
		f(&o)
	}
	if o.Relays <= 0 {
		o.Relays = 4
	}
	if o.Copies <= 0 {
		o.Copies = 16
	}
	s := &suite[TTx]{newDriver: newDriver, opts: o}
	for _, c := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Migrate", s.testMigrate},
		{"OutboxAddClaimMark", s.testAddClaimMark},
		{"OutboxRollbackNotDelivered", s.testRollback},
		{"OutboxRejectDeadRedriveDiscard", s.testDead},
		{"OutboxCleanup", s.testCleanup},
		{"OutboxKeyOrder", s.testKeyOrder},
		{"RelaysConcurrent", s.testRelaysConcurrent},
		{"InboxHandle", s.testInboxHandle},
		{"InboxLowLevel", s.testInboxLowLevel},
		{"InboxSweepStats", s.testInboxSweepStats},
		{"InboxConcurrentCopies", s.testInboxConcurrent},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
}

type suite[TTx any] struct {
	newDriver func(t *testing.T) driver.Driver[TTx]
	opts      Options
}

const inboxTable = "txbox_inbox"

// setup returns a driver on a migrated database (outbox and inbox).
func (s *suite[TTx]) setup(t *testing.T) driver.Driver[TTx] {
	t.Helper()
	drv := s.newDriver(t)
	m, err := migrate.New(drv, migrate.Config{InboxTables: []string{inboxTable}})
	must(t, err, "migrate.New")
	_, err = m.Up(context.Background())
	must(t, err, "migrate up")
	return drv
}

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func outbox[TTx any](t *testing.T, drv driver.Driver[TTx]) *txbox.Outbox[TTx] {
	ob, err := txbox.New(drv, txbox.Config{})
	must(t, err, "txbox.New")
	return ob
}

// add writes msgs in one transaction of the caller's type, committed when
// commit is true.
func add[TTx any](t *testing.T, drv driver.Driver[TTx], ob *txbox.Outbox[TTx], commit bool, msgs ...txbox.Message) {
	t.Helper()
	ctx := context.Background()
	tx, dtx, err := drv.BeginTx(ctx)
	must(t, err, "begin")
	if err := ob.Add(ctx, tx, msgs...); err != nil {
		_ = dtx.Rollback(ctx)
		t.Fatalf("add: %v", err)
	}
	if commit {
		must(t, dtx.Commit(ctx), "commit")
	} else {
		must(t, dtx.Rollback(ctx), "rollback")
	}
}

func newRelay[TTx any](t *testing.T, drv driver.Driver[TTx], pub txbox.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.DisableNotify = true
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(t)
	}
	r, err := relay.New(drv, pub, cfg)
	must(t, err, "relay.New")
	return r
}

// drain runs rounds until one claims nothing.
func drain(t *testing.T, r *relay.Relay) {
	t.Helper()
	for {
		n, err := r.Round(context.Background())
		must(t, err, "round")
		if n == 0 {
			return
		}
	}
}

// Recorder is a txbox.Publisher that records what it is given and
// acknowledges it, or rejects the messages Reject says to reject. It is
// safe for concurrent use.
type Recorder struct {
	// Reject, when set, says whether to reject a message (reported with
	// txbox.Reject, which costs it an attempt).
	Reject func(txbox.Message) bool

	mu   sync.Mutex
	msgs []txbox.Message
}

var _ txbox.Publisher = (*Recorder)(nil)

// Publish records msgs and acknowledges every one Reject does not refuse.
func (p *Recorder) Publish(_ context.Context, msgs []txbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for i, m := range msgs {
		if p.Reject != nil && p.Reject(m) {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = txbox.Reject(fmt.Errorf("test publisher rejects %s", m.ID))
			continue
		}
		p.msgs = append(p.msgs, m)
	}
	return errs
}

// Published returns the acknowledged messages, in publish order.
func (p *Recorder) Published() []txbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

func payloads(msgs []txbox.Message, key string) string {
	var out []string
	for _, m := range msgs {
		if key == "*" || m.Key == key {
			out = append(out, string(m.Payload))
		}
	}
	return strings.Join(out, ",")
}

func (s *suite[TTx]) testMigrate(t *testing.T) {
	ctx := context.Background()
	drv := s.newDriver(t)
	m, err := migrate.New(drv, migrate.Config{InboxTables: []string{"inbox_a", "inbox_b"}})
	must(t, err, "migrate.New")
	st, err := m.Status(ctx)
	must(t, err, "status before up")
	for _, x := range st {
		if !x.AppliedAt.IsZero() {
			t.Fatalf("%s v%d applied before Up", x.Target, x.Version)
		}
	}
	applied, err := m.Up(ctx)
	must(t, err, "up")
	if len(applied) != len(st) || len(applied) == 0 {
		t.Fatalf("Up applied %d of %d migrations", len(applied), len(st))
	}
	again, err := m.Up(ctx)
	must(t, err, "second up")
	if len(again) != 0 {
		t.Fatalf("second Up applied %d migrations, want none", len(again))
	}
	pending, err := m.Pending(ctx)
	must(t, err, "pending")
	if len(pending) != 0 {
		t.Fatalf("%d migrations pending after Up", len(pending))
	}
	st, err = m.Status(ctx)
	must(t, err, "status")
	for _, x := range st {
		if x.AppliedAt.IsZero() {
			t.Fatalf("%s v%d not recorded as applied", x.Target, x.Version)
		}
	}
	// The tables work: one message and one receipt.
	ob := outbox(t, drv)
	add(t, drv, ob, true, txbox.Message{Topic: "t", Payload: []byte("x")})
	for _, table := range []string{"inbox_a", "inbox_b"} {
		ib, err := inbox.New(drv, inbox.Config{Table: table, Hook: func(context.Context, inbox.Event) {}})
		must(t, err, "inbox.New")
		res, err := ib.Handle(ctx, "src", "m1", nil, func(context.Context, TTx) error { return nil })
		if err != nil || res != inbox.Fresh {
			t.Fatalf("%s: Handle = %v, %v", table, res, err)
		}
	}
}

func (s *suite[TTx]) testAddClaimMark(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	msgs := []txbox.Message{
		{ID: "id-1", Topic: "orders.placed", Payload: []byte("p1"), Headers: map[string]string{"traceparent": "00-abc"}},
		{ID: "id-2", Topic: "orders.paid", Key: "order-7", Payload: []byte("p2")},
		{Topic: "orders.shipped", Payload: []byte{0, 1, 2, 255}},
	}
	add(t, drv, ob, true, msgs...)
	if msgs[2].ID == "" {
		t.Fatal("Add did not assign an id")
	}
	must(t, ob.AddNoTx(ctx, txbox.Message{ID: "id-4", Topic: "t", Payload: []byte("p4")}), "AddNoTx")

	pub := &Recorder{}
	r := newRelay(t, drv, pub, relay.Config{})
	st, err := r.Stats(ctx)
	must(t, err, "stats")
	if st.Pending != 4 {
		t.Fatalf("pending %d, want 4", st.Pending)
	}
	drain(t, r)
	got := pub.Published()
	if len(got) != 4 {
		t.Fatalf("published %d messages, want 4", len(got))
	}
	// Publish order across keys is not promised (keyed and unkeyed
	// messages may go in separate groups): compare by id.
	byID := map[string]txbox.Message{}
	for _, g := range got {
		byID[g.ID] = g
	}
	want := append(msgs, txbox.Message{ID: "id-4", Topic: "t", Payload: []byte("p4")})
	for i, m := range want {
		g := byID[m.ID]
		if g.ID != m.ID || g.Topic != m.Topic || g.Key != m.Key || string(g.Payload) != string(m.Payload) || fmt.Sprint(g.Headers) != fmt.Sprint(m.Headers) {
			t.Errorf("message %d: published %+v, want %+v", i, g, m)
		}
	}
	st, err = r.Stats(ctx)
	must(t, err, "stats")
	if st.Pending != 0 || st.Published != 4 {
		t.Fatalf("after drain: pending %d, published %d", st.Pending, st.Published)
	}
	drain(t, r)
	if n := len(pub.Published()); n != 4 {
		t.Fatalf("a marked message was published again (%d publishes)", n)
	}
}

func (s *suite[TTx]) testRollback(t *testing.T) {
	drv := s.setup(t)
	ob := outbox(t, drv)
	add(t, drv, ob, false, txbox.Message{ID: "rolled-back", Topic: "t", Payload: []byte("x")})
	add(t, drv, ob, true, txbox.Message{ID: "committed", Topic: "t", Payload: []byte("y")})
	pub := &Recorder{}
	drain(t, newRelay(t, drv, pub, relay.Config{}))
	got := pub.Published()
	if len(got) != 1 || got[0].ID != "committed" {
		t.Fatalf("published %v, want only the committed message", got)
	}
}

func (s *suite[TTx]) testDead(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	add(t, drv, ob, true,
		txbox.Message{ID: "poison", Topic: "t", Key: "k", Payload: []byte("k1")},
		txbox.Message{ID: "parked", Topic: "t", Key: "k", Payload: []byte("k2")},
		txbox.Message{ID: "other", Topic: "t", Key: "j", Payload: []byte("j1")},
	)
	var refuse atomic.Bool
	refuse.Store(true)
	pub := &Recorder{Reject: func(m txbox.Message) bool { return m.ID == "poison" && refuse.Load() }}
	r := newRelay(t, drv, pub, relay.Config{MaxAttempts: 2, RetryDelay: time.Microsecond})
	letters, err := dead.New(drv, txbox.Config{})
	must(t, err, "dead.New")
	for {
		_, err := r.Round(ctx)
		must(t, err, "round")
		l, err := letters.List(ctx, 10)
		must(t, err, "list dead")
		if len(l) > 0 {
			break
		}
	}
	l, err := letters.List(ctx, 10)
	must(t, err, "list dead")
	if len(l) != 1 || l[0].ID != "poison" || l[0].Attempts != 2 || l[0].Parked != 1 || !strings.Contains(l[0].LastError, "rejects poison") || l[0].DeadAt.IsZero() {
		t.Fatalf("dead letters %+v, want poison after 2 attempts, parking 1", l)
	}
	drain(t, r)
	if got := payloads(pub.Published(), "*"); got != "j1" {
		t.Fatalf("published %s while k was parked, want j1", got)
	}
	st, err := r.Stats(ctx)
	must(t, err, "stats")
	if st.DeadRows != 1 || st.Parked != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v, want 1 dead, 1 parked, 1 pending", st)
	}

	refuse.Store(false)
	n, err := letters.Redrive(ctx, l[0].Seq)
	must(t, err, "redrive")
	if n != 1 {
		t.Fatalf("redrive changed %d rows", n)
	}
	drain(t, r)
	if got := payloads(pub.Published(), "k"); got != "k1,k2" {
		t.Fatalf("key k published %s after redrive, want k1,k2", got)
	}

	// Discard: a dead message is deleted and its key released.
	refuse.Store(true)
	add(t, drv, ob, true,
		txbox.Message{ID: "poison", Topic: "t", Key: "m", Payload: []byte("m1")},
		txbox.Message{ID: "after", Topic: "t", Key: "m", Payload: []byte("m2")},
	)
	for {
		_, err := r.Round(ctx)
		must(t, err, "round")
		l, err = letters.List(ctx, 10)
		must(t, err, "list dead")
		if len(l) > 0 {
			break
		}
	}
	n, err = letters.Discard(ctx)
	must(t, err, "discard")
	if n != 1 {
		t.Fatalf("discard deleted %d rows", n)
	}
	drain(t, r)
	if got := payloads(pub.Published(), "m"); got != "m2" {
		t.Fatalf("key m published %s after discard, want m2", got)
	}
}

func (s *suite[TTx]) testCleanup(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	var msgs []txbox.Message
	for i := range 7 {
		msgs = append(msgs, txbox.Message{Topic: "t", Payload: []byte{byte(i)}})
	}
	add(t, drv, ob, true, msgs...)
	pub := &Recorder{}
	r := newRelay(t, drv, pub, relay.Config{Retention: time.Microsecond, CleanupBatchSize: 3})
	drain(t, r)
	add(t, drv, ob, true, txbox.Message{Topic: "t", Payload: []byte("pending")})
	// Published rows are older than a microsecond once the clock moves.
	start := time.Now()
	for time.Since(start) < time.Millisecond {
		time.Sleep(time.Millisecond)
	}
	n, err := r.Cleanup(ctx)
	must(t, err, "cleanup")
	if n != 7 {
		t.Fatalf("cleanup deleted %d rows, want the 7 published", n)
	}
	st, err := r.Stats(ctx)
	must(t, err, "stats")
	if st.Pending != 1 {
		t.Fatalf("pending %d after cleanup, want 1", st.Pending)
	}
	long := newRelay(t, drv, pub, relay.Config{Retention: time.Hour})
	drain(t, long)
	if n, err := long.Cleanup(ctx); err != nil || n != 0 {
		t.Fatalf("cleanup within retention deleted %d, %v", n, err)
	}
}

func (s *suite[TTx]) testKeyOrder(t *testing.T) {
	drv := s.setup(t)
	ob := outbox(t, drv)
	// Writers add to a few keys concurrently, several messages per
	// transaction; each key's messages carry a per-key sequence taken
	// under a Go lock held until commit, so commit order is known.
	const keys, writers, perWriter = 3, 6, 10
	var locks [keys]sync.Mutex
	var next [keys]int
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range perWriter {
				k := (w + i) % keys
				locks[k].Lock()
				tx, dtx, err := drv.BeginTx(ctx)
				if err == nil {
					next[k]++
					err = ob.Add(ctx, tx,
						txbox.Message{Topic: "t", Payload: []byte("unkeyed")},
						txbox.Message{Topic: "t", Key: fmt.Sprint("key", k), Payload: []byte(fmt.Sprint(next[k]))})
					if err == nil {
						err = dtx.Commit(ctx)
					} else {
						_ = dtx.Rollback(ctx)
					}
				}
				locks[k].Unlock()
				if err != nil {
					t.Errorf("writer: %v", err)
					return
				}
			}
		}()
	}
	pub := &Recorder{}
	r := newRelay(t, drv, pub, relay.Config{BatchSize: 7})
	wg.Wait()
	drain(t, r)
	for k := range keys {
		var want []string
		for i := 1; i <= next[k]; i++ {
			want = append(want, fmt.Sprint(i))
		}
		if got := payloads(pub.Published(), fmt.Sprint("key", k)); got != strings.Join(want, ",") {
			t.Errorf("key%d published %s, want %s", k, got, strings.Join(want, ","))
		}
	}
}

func (s *suite[TTx]) testRelaysConcurrent(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	const total = 600
	pub := &Recorder{}
	var relays []*relay.Relay
	for range s.opts.Relays {
		r := newRelay(t, drv, pub, relay.Config{BatchSize: 25, Concurrency: 2, PollInterval: time.Millisecond})
		must(t, r.Start(ctx), "start relay")
		relays = append(relays, r)
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < total/6; i += 10 {
				var msgs []txbox.Message
				for j := range 10 {
					key := ""
					if j%2 == 0 {
						key = fmt.Sprint("k", (i+j)%5)
					}
					msgs = append(msgs, txbox.Message{ID: fmt.Sprintf("w%d-%d", w, i+j), Topic: "t", Key: key, Payload: []byte("x")})
				}
				tx, dtx, err := drv.BeginTx(ctx)
				if err == nil {
					if err = ob.Add(ctx, tx, msgs...); err == nil {
						err = dtx.Commit(ctx)
					} else {
						_ = dtx.Rollback(ctx)
					}
				}
				if err != nil {
					t.Errorf("writer: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for len(pub.Published()) < total && !t.Failed() {
		time.Sleep(5 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, r := range relays {
		must(t, r.Stop(stopCtx), "stop relay")
	}
	seen := map[string]int{}
	for _, m := range pub.Published() {
		seen[m.ID]++
	}
	if len(seen) != total {
		t.Fatalf("%d distinct messages published, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s published %d times by %d relays", id, n, s.opts.Relays)
		}
	}
}

func (s *suite[TTx]) newInbox(t *testing.T, drv driver.Driver[TTx], cfg inbox.Config) *inbox.Inbox[TTx] {
	t.Helper()
	cfg.Table = inboxTable
	if cfg.Hook == nil {
		cfg.Hook = func(context.Context, inbox.Event) {}
	}
	ib, err := inbox.New(drv, cfg)
	must(t, err, "inbox.New")
	return ib
}

func (s *suite[TTx]) testInboxHandle(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ib := s.newInbox(t, drv, inbox.Config{})
	ob := outbox(t, drv)
	runs := 0
	handler := func(ctx context.Context, tx TTx) error {
		runs++
		return ob.Add(ctx, tx, txbox.Message{Topic: "effect", Payload: []byte("x")})
	}
	res, err := ib.Handle(ctx, "nats:orders", "m1", map[string]string{"subject": "orders"}, handler)
	if err != nil || res != inbox.Fresh {
		t.Fatalf("first Handle = %v, %v; want fresh", res, err)
	}
	res, err = ib.Handle(ctx, "nats:orders", "m1", nil, handler)
	if err != nil || res != inbox.Duplicate {
		t.Fatalf("second Handle = %v, %v; want duplicate", res, err)
	}
	// Same id, other source: another message. Ids differing only in case
	// or trailing space are other messages too.
	for _, k := range [][2]string{{"nats:payments", "m1"}, {"nats:orders", "M1"}, {"nats:orders", "m1 "}} {
		res, err = ib.Handle(ctx, k[0], k[1], nil, handler)
		if err != nil || res != inbox.Fresh {
			t.Fatalf("Handle(%q, %q) = %v, %v; want fresh", k[0], k[1], res, err)
		}
	}
	// A failing handler rolls back its effects and the receipt.
	boom := errors.New("boom")
	res, err = ib.Handle(ctx, "nats:orders", "m2", nil, func(ctx context.Context, tx TTx) error {
		if err := handler(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	var herr *inbox.HandlerError
	if res != inbox.Failed || !errors.As(err, &herr) || !errors.Is(err, boom) {
		t.Fatalf("failing Handle = %v, %v", res, err)
	}
	res, err = ib.Handle(ctx, "nats:orders", "m2", nil, handler)
	if err != nil || res != inbox.Fresh {
		t.Fatalf("Handle after a failure = %v, %v; want fresh", res, err)
	}
	if runs != 6 {
		t.Fatalf("handler ran %d times, want 6", runs)
	}
	st, err := newRelay(t, drv, &Recorder{}, relay.Config{}).Stats(ctx)
	must(t, err, "stats")
	if st.Pending != 5 {
		t.Fatalf("%d effects committed, want 5 (the failed run's rolled back)", st.Pending)
	}
	fresh, err := ib.IsFresh(ctx, "nats:orders", "m1")
	if err != nil || fresh {
		t.Fatalf("IsFresh(m1) = %v, %v", fresh, err)
	}
	fresh, err = ib.IsFresh(ctx, "nats:orders", "never")
	if err != nil || !fresh {
		t.Fatalf("IsFresh(never) = %v, %v", fresh, err)
	}
}

func (s *suite[TTx]) testInboxLowLevel(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ib := s.newInbox(t, drv, inbox.Config{})
	tx, dtx, err := drv.BeginTx(ctx)
	must(t, err, "begin")
	fresh, err := ib.RecordReceive(ctx, tx, "src", "a", nil)
	if err != nil || !fresh {
		t.Fatalf("RecordReceive = %v, %v; want fresh", fresh, err)
	}
	fresh, err = ib.RecordReceive(ctx, tx, "src", "a", nil)
	if err != nil || fresh {
		t.Fatalf("second RecordReceive in the same tx = %v, %v; want duplicate", fresh, err)
	}
	must(t, ib.MarkProcessed(ctx, tx, "src", "a"), "mark processed")
	must(t, ib.MarkProcessed(ctx, tx, "src", "a"), "mark processed again")
	if err := ib.MarkProcessed(ctx, tx, "src", "never"); !errors.Is(err, inbox.ErrNotReceived) {
		t.Fatalf("MarkProcessed(never) = %v, want ErrNotReceived", err)
	}
	must(t, dtx.Commit(ctx), "commit")

	// Marking a committed, processed receipt again is not an error either.
	tx, dtx, err = drv.BeginTx(ctx)
	must(t, err, "begin")
	must(t, ib.MarkProcessed(ctx, tx, "src", "a"), "mark committed receipt again")
	fresh, err = ib.RecordReceive(ctx, tx, "src", "a", nil)
	if err != nil || fresh {
		t.Fatalf("RecordReceive of a committed receipt = %v, %v; want duplicate", fresh, err)
	}
	must(t, dtx.Rollback(ctx), "rollback")

	// A rolled-back receipt is forgotten.
	tx, dtx, err = drv.BeginTx(ctx)
	must(t, err, "begin")
	fresh, err = ib.RecordReceive(ctx, tx, "src", "b", nil)
	if err != nil || !fresh {
		t.Fatalf("RecordReceive(b) = %v, %v", fresh, err)
	}
	must(t, dtx.Rollback(ctx), "rollback")
	if fresh, err := ib.IsFresh(ctx, "src", "b"); err != nil || !fresh {
		t.Fatalf("IsFresh(b) after rollback = %v, %v", fresh, err)
	}
}

func (s *suite[TTx]) testInboxSweepStats(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	keep := s.newInbox(t, drv, inbox.Config{})
	ok := func(context.Context, TTx) error { return nil }
	for i := range 5 {
		_, err := keep.Handle(ctx, "a", fmt.Sprint("m", i), nil, ok)
		must(t, err, "handle")
	}
	_, err := keep.Handle(ctx, "b", "m", nil, ok)
	must(t, err, "handle")
	tx, dtx, err := drv.BeginTx(ctx)
	must(t, err, "begin")
	_, err = keep.RecordReceive(ctx, tx, "b", "unprocessed", nil)
	must(t, err, "record")
	must(t, dtx.Commit(ctx), "commit")

	st, err := keep.Stats(ctx)
	must(t, err, "stats")
	want := []inbox.SourceStats{{Source: "a", Total: 5, Processed: 5}, {Source: "b", Total: 2, Processed: 1, Pending: 1}}
	if fmt.Sprint(st) != fmt.Sprint(want) {
		t.Fatalf("stats %v, want %v", st, want)
	}
	n, err := keep.Sweep(ctx)
	if err != nil || n != 0 {
		t.Fatalf("Sweep within retention = %d, %v", n, err)
	}
	// With a retention of a microsecond, everything is past it (twice over)
	// once the clock has moved; batches of 2 take several statements.
	start := time.Now()
	for time.Since(start) < time.Millisecond {
		time.Sleep(time.Millisecond)
	}
	short := s.newInbox(t, drv, inbox.Config{Retention: time.Microsecond, SweepBatchSize: 2})
	n, err = short.Sweep(ctx)
	if err != nil || n != 7 {
		t.Fatalf("Sweep = %d, %v; want 7", n, err)
	}
	if st, _ := keep.Stats(ctx); len(st) != 0 {
		t.Fatalf("stats after sweep %v", st)
	}
	res, err := keep.Handle(ctx, "a", "m0", nil, ok)
	if err != nil || res != inbox.Fresh {
		t.Fatalf("replay after sweep = %v, %v; want fresh", res, err)
	}
}

func (s *suite[TTx]) testInboxConcurrent(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ib := s.newInbox(t, drv, inbox.Config{})
	ob := outbox(t, drv)
	const messages = 4
	var fresh, dup, runs atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for m := range messages {
		for range s.opts.Copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := ib.Handle(ctx, "src", fmt.Sprint("m", m), nil, func(ctx context.Context, tx TTx) error {
					runs.Add(1)
					return ob.Add(ctx, tx, txbox.Message{Topic: "effect", Payload: []byte(fmt.Sprint(m))})
				})
				switch {
				case err != nil:
					t.Errorf("Handle: %v", err)
				case res == inbox.Fresh:
					fresh.Add(1)
				case res == inbox.Duplicate:
					dup.Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if fresh.Load() != messages || dup.Load() != int64(messages*(s.opts.Copies-1)) || runs.Load() != messages {
		t.Fatalf("%d copies of %d messages: %d fresh, %d duplicate, handler ran %d times",
			s.opts.Copies, messages, fresh.Load(), dup.Load(), runs.Load())
	}
	st, err := newRelay(t, drv, &Recorder{}, relay.Config{}).Stats(ctx)
	must(t, err, "stats")
	if st.Pending != messages {
		t.Fatalf("%d effects committed, want %d", st.Pending, messages)
	}
}

func quietLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
