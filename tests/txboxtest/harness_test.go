package txboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

var quiet = slog.New(slog.DiscardHandler)

func sqliteOutbox(t *testing.T) *txbox.Outbox[*sql.Tx] {
	return newOutbox(t, txboxsql.New(testenv.SQLite(t), txboxdriver.SQLite))
}

// TestDrainRelay drains a backlog in many rounds, keeps per-key order,
// leaves a rejected row pending, and finds nothing the second time.
func TestDrainRelay(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"pgx", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if name == "pgx" {
				testDrainRelay(t, newOutbox(t, testenv.PgxDriver(t, 4)))
			} else {
				testDrainRelay(t, sqliteOutbox(t))
			}
		})
	}
}

func testDrainRelay[TTx any](t *testing.T, ob *txbox.Outbox[TTx]) {
	ctx := context.Background()
	b := txboxtest.NewBroker(txboxtest.BrokerConfig{PublishError: refuse})
	var msgs []txbox.Message
	for i := range 250 {
		m := txbox.Message{Topic: "order.placed", Payload: []byte(strconv.Itoa(i))}
		if i%5 != 0 {
			m.Key = "k" + strconv.Itoa(i%3)
		}
		msgs = append(msgs, m)
	}
	msgs = append(msgs, txbox.Message{ID: "refused", Topic: "order.bad", Payload: []byte("x")})
	for i := 0; i < len(msgs); i += 50 { // several transactions
		testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, msgs[i:min(i+50, len(msgs))]...)), "add")
	}
	r, err := relay.New(ob, b, relay.Config{BatchSize: 32, Logger: quiet})
	testenv.Must(t, err, "relay.New")

	if n := txboxtest.DrainRelay(ctx, t, r, nil); n != 250 {
		t.Fatalf("DrainRelay published %d, want 250", n)
	}
	got := b.Published("order.placed")
	if len(got) != 250 {
		t.Fatalf("broker holds %d, want 250", len(got))
	}
	last := map[string]int{}
	for _, m := range got {
		n, _ := strconv.Atoi(string(m.Payload))
		if prev, ok := last[m.Key]; ok && m.Key != "" && n <= prev {
			t.Fatalf("key %s: %d published after %d", m.Key, n, prev)
		}
		last[m.Key] = n
	}
	// The rejected row waits for its retry: still undelivered.
	txboxtest.RequireAdded(ctx, t, ob, &txboxtest.RequireAddedOpts{ID: "refused"})
	if n := txboxtest.DrainRelay(ctx, t, r, nil); n != 0 {
		t.Fatalf("second DrainRelay published %d, want 0", n)
	}
}

// TestDrainRelayRetriesTransientFailures: a broker that fails twice, then
// accepts, is drained; one that never accepts fails the test once the
// inactivity timeout passes.
func TestDrainRelayRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ob := sqliteOutbox(t)
	testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "a", Payload: []byte("1")}, txbox.Message{Topic: "a", Payload: []byte("2")})), "add")
	var calls, down atomic.Int64
	down.Store(1)
	b := txboxtest.NewBroker(txboxtest.BrokerConfig{PublishError: func(txbox.Message) error {
		if down.Load() == 1 || calls.Add(1) <= 2 {
			return errors.New("connection refused")
		}
		return nil
	}})
	r, err := relay.New(ob, b, relay.Config{Logger: quiet})
	testenv.Must(t, err, "relay.New")

	start := time.Now()
	msg := failed(t, func(tb txboxtest.TB) {
		txboxtest.DrainRelay(ctx, tb, r, &txboxtest.DrainOpts{InactivityTimeout: 200 * time.Millisecond})
	})
	wantFailure(t, msg, "DrainRelay: no progress for 200ms", "connection refused")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failed after %s, want about the inactivity timeout", d)
	}

	down.Store(0)
	if n := txboxtest.DrainRelay(ctx, t, r, nil); n != 2 {
		t.Fatalf("DrainRelay published %d after two transient failures, want 2", n)
	}
}

// newConsumer returns a consumer on ob's database with b as its broker.
func newConsumer[TTx any](t *testing.T, ob *txbox.Outbox[TTx], b *txboxtest.Broker, cfg consumer.Config) *consumer.Consumer[TTx] {
	cfg.Broker, cfg.Logger = b, quiet
	c, err := consumer.New(ob, cfg)
	testenv.Must(t, err, "consumer.New")
	return c
}

// TestDeliver: each outcome of a handler, as Deliver reports it.
func TestDeliver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ob := sqliteOutbox(t)
	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	b.Bind("billing", "order.*")
	c := newConsumer(t, ob, b, consumer.Config{MaxDeliveries: 3})
	failures := map[string]int{} // payload → failures before success; -1 always
	var mu sync.Mutex
	runs := map[string]int{}
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: "billing"}, func(ctx context.Context, tx *sql.Tx, msg consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		p := string(msg.Payload)
		runs[p]++
		switch {
		case p == "poison":
			return consumer.Permanent(errors.New("cannot parse"))
		case failures[p] < 0 || runs[p] <= failures[p]:
			return fmt.Errorf("failure %d", runs[p])
		}
		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "invoice.created", Payload: msg.Payload})
		return err
	}), "register")
	failures["flaky"], failures["broken"] = 2, -1

	check := func(name string, res txboxtest.Result, want txboxtest.Outcome, deliveries, settlements int) {
		t.Helper()
		if res.Outcome != want || res.Deliveries != deliveries || len(res.Settlements) != settlements {
			t.Errorf("%s: %s on delivery %d with %d settlements, want %s on delivery %d with %d", name, res.Outcome, res.Deliveries, len(res.Settlements), want, deliveries, settlements)
		}
	}
	ok := txbox.Message{ID: "m-ok", Topic: "order.placed", Payload: []byte("ok")}
	check("ok", txboxtest.Deliver(ctx, t, b, c, "billing", ok, nil), txboxtest.Acked, 1, 1)
	txboxtest.RequireAdded(ctx, t, ob, &txboxtest.RequireAddedOpts{Topic: "invoice.created", Payload: []byte("ok")})
	check("again", txboxtest.Deliver(ctx, t, b, c, "billing", ok, nil), txboxtest.Duplicate, 1, 1)

	res := txboxtest.Deliver(ctx, t, b, c, "billing", txbox.Message{Topic: "order.placed", Payload: []byte("flaky")}, nil)
	check("flaky, first delivery", res, txboxtest.Retried, 1, 1)
	if res.Settlements[0].Delay != time.Second {
		t.Errorf("retry delay %s, want the consumer's 1s (the broker caps what it waits)", res.Settlements[0].Delay)
	}
	if err := b.WaitIdle(ctx); err != nil { // the retries go on: flaky succeeds on its third delivery
		t.Fatal(err)
	}

	res = txboxtest.Deliver(ctx, t, b, c, "billing", txbox.Message{ID: "m-flaky2", Topic: "order.placed", Payload: []byte("flaky")}, &txboxtest.DeliverOpts{Final: true})
	check("flaky again (runs 4..)", res, txboxtest.Acked, 1, 1) // runs["flaky"] is past its failures now
	mu.Lock()
	runs["flaky"], failures["flaky"] = 0, 2
	mu.Unlock()
	res = txboxtest.Deliver(ctx, t, b, c, "billing", txbox.Message{ID: "m-flaky3", Topic: "order.placed", Payload: []byte("flaky")}, &txboxtest.DeliverOpts{Final: true})
	check("flaky, final", res, txboxtest.Acked, 3, 3)

	res = txboxtest.Deliver(ctx, t, b, c, "billing", txbox.Message{ID: "m-broken", Topic: "order.placed", Payload: []byte("broken")}, &txboxtest.DeliverOpts{Final: true})
	check("broken, final", res, txboxtest.DeadLettered, 3, 3)
	res = txboxtest.Deliver(ctx, t, b, c, "billing", txbox.Message{ID: "m-poison", Topic: "order.placed", Payload: []byte("poison")}, nil)
	check("poison", res, txboxtest.DeadLettered, 1, 1)
	if !consumer.IsPermanent(res.Settlements[0].Cause) {
		t.Errorf("poison's cause %v, want the handler's permanent error", res.Settlements[0].Cause)
	}
	var dead []string
	for _, dl := range b.DeadLetters() {
		dead = append(dead, fmt.Sprintf("%s@%d", dl.Message.ID, dl.Deliveries))
	}
	if fmt.Sprint(dead) != "[m-broken@3 m-poison@1]" {
		t.Errorf("dead letters %v", dead)
	}
	if st := c.Stats(); st.Duplicates != 1 || st.DeadLettered != 2 {
		t.Errorf("consumer stats %+v", st)
	}

	// A binding no handler consumes: no outcome within the inactivity timeout.
	quick := txboxtest.NewBroker(txboxtest.BrokerConfig{InactivityTimeout: 100 * time.Millisecond})
	quick.Bind("used")
	quick.Bind("unused")
	qc := newConsumer(t, ob, quick, consumer.Config{})
	testenv.Must(t, qc.HandleAtLeastOnce(consumer.HandlerConfig{Name: "used", Binding: "used"}, func(context.Context, consumer.Message) error { return nil }), "register")
	wantFailure(t, failed(t, func(tb txboxtest.TB) {
		txboxtest.Deliver(ctx, tb, quick, qc, "unused", txbox.Message{Topic: "x"}, nil)
	}), "no outcome", "no activity within the inactivity timeout (100ms)")
	wantFailure(t, failed(t, func(tb txboxtest.TB) {
		txboxtest.Deliver(ctx, tb, quick, qc, "missing", txbox.Message{Topic: "x"}, nil)
	}), `no binding "missing"`)
	t.Cleanup(func() { _ = qc.Stop(context.Background()) })
}

// TestBrokerPerKeyOrder: a consumer running 8 handlers side by side, with
// random handling times and retries, still sees each key in order.
func TestBrokerPerKeyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	b.Bind("q", "evt.>")
	c, err := consumer.New[any](nil, consumer.Config{Broker: b, Logger: quiet, Concurrency: 8, BackoffBase: time.Millisecond})
	testenv.Must(t, err, "consumer.New")
	var mu sync.Mutex
	seen := map[string][]int{}
	testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "q", Binding: "q"}, func(_ context.Context, m consumer.Message) error {
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		n, _ := strconv.Atoi(string(m.Payload))
		if n%7 == 0 && m.Deliveries == 1 {
			return errors.New("first delivery fails")
		}
		mu.Lock()
		seen[m.Key] = append(seen[m.Key], n)
		mu.Unlock()
		return nil
	}), "register")
	testenv.Must(t, c.Start(ctx), "start")
	defer func() { _ = c.Stop(ctx) }()
	var msgs []txbox.Message
	for i := range 200 {
		msgs = append(msgs, txbox.Message{ID: "m" + strconv.Itoa(i), Topic: "evt.k" + strconv.Itoa(i%5), Key: "k" + strconv.Itoa(i%5), Payload: []byte(strconv.Itoa(i))})
	}
	if errs := b.Publish(ctx, msgs); errs != nil {
		t.Fatal(errs)
	}
	testenv.Must(t, b.WaitIdle(ctx), "wait idle")
	for k, ns := range seen {
		if len(ns) != 40 {
			t.Errorf("key %s: %d handled, want 40", k, len(ns))
		}
		for i := 1; i < len(ns); i++ {
			if ns[i] <= ns[i-1] {
				t.Fatalf("key %s: %d handled after %d", k, ns[i], ns[i-1])
			}
		}
	}
}

// TestBrokerRouting: patterns, one copy per binding, dedupe within the
// window, reserved headers not delivered, release on Close.
func TestBrokerRouting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	b.Bind("one", "order.*")
	b.Bind("deep", "order.>", "audit")
	b.Bind("exact", "order.placed")
	for _, tc := range []struct {
		topic string
		want  []string
	}{
		{"order.placed", []string{"one", "deep", "exact"}},
		{"order.placed.eu", []string{"deep"}},
		{"order", nil},
		{"audit", []string{"deep"}},
		{"audit.x", nil},
		{"orders.placed", nil},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			b := txboxtest.NewBroker(txboxtest.BrokerConfig{InactivityTimeout: 50 * time.Millisecond})
			for _, bd := range []struct{ n, p string }{{"one", "order.*"}, {"deep", "order.>"}, {"deep", "audit"}, {"exact", "order.placed"}} {
				b.Bind(bd.n, bd.p)
			}
			b.Publish(ctx, []txbox.Message{{ID: "x", Topic: tc.topic}})
			var got []string
			for _, name := range []string{"one", "deep", "exact"} {
				s, err := b.Subscribe(ctx, name, 0)
				testenv.Must(t, err, "subscribe")
				c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				if d, err := s.Next(c); err == nil {
					got = append(got, name)
					_ = d.Ack(ctx)
				}
				cancel()
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%s reached %v, want %v", tc.topic, got, tc.want)
			}
		})
	}

	m := txbox.Message{ID: "d1", Topic: "order.placed", Headers: map[string]string{"Message-Id": "evil", "ok": "1"}}
	b.Publish(ctx, []txbox.Message{m, m})
	if b.Dropped() != 1 || len(b.Published("")) != 1 || b.Published("order.placed")[0].Headers["Message-Id"] != "evil" {
		t.Errorf("dedupe: dropped %d, published %v", b.Dropped(), b.Published(""))
	}
	s, err := b.Subscribe(ctx, "one", 1)
	testenv.Must(t, err, "subscribe")
	d, err := s.Next(ctx)
	testenv.Must(t, err, "next")
	if h := d.Message().Headers; h["ok"] != "1" || h["Message-Id"] != "" {
		t.Errorf("delivered headers %v, want the reserved one dropped", h)
	}
	testenv.Must(t, s.Close(ctx), "close")
	if err := d.Ack(ctx); err == nil {
		t.Error("ack after Close released the delivery: nil error")
	}
	s, err = b.Subscribe(ctx, "one", 1)
	testenv.Must(t, err, "subscribe")
	d, err = s.Next(ctx)
	testenv.Must(t, err, "next")
	if r := d.Message(); r.ID != "d1" || r.Deliveries != 2 || r.Binding != "one" {
		t.Errorf("after Close: %+v, want d1's second delivery", r)
	}

	nodup := txboxtest.NewBroker(txboxtest.BrokerConfig{DedupeWindow: -1})
	nodup.Publish(ctx, []txbox.Message{m, m})
	if len(nodup.Published("")) != 2 {
		t.Errorf("without dedupe: %d kept, want 2", len(nodup.Published("")))
	}
}
