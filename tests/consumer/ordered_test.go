package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
)

// orderedBrokers are the brokers the ordered-mode tests run on: all four,
// so each adapter's key (Txbox-Key header, Kafka record key, Redis key
// field) is checked too.
var orderedBrokers = []struct {
	name string
	make func(t *testing.T) *broker
}{
	{"nats", func(t *testing.T) *broker { return natsBroker(t, testenv.NATS(t), 30*time.Second) }},
	{"rabbitmq", func(t *testing.T) *broker { u := testenv.RabbitMQ(t); return rabbitBroker(t, u, u) }},
	{"kafka", func(t *testing.T) *broker { return kafkaBroker(t, 3) }},
	{"redis", func(t *testing.T) *broker { return redisBroker(t, 30*time.Second) }},
}

// orderedRig is an Ordered inbox handler on PostgreSQL that records each
// message it applies (payload KEY/VERSION) in the table applied, in the
// order of its commits.
type orderedRig struct {
	t  *testing.T
	b  *broker
	d  db[pgx.Tx]
	c  *consumer.Consumer[pgx.Tx]
	hc consumer.HandlerConfig
}

// newOrderedRig starts an Ordered inbox handler whose function is before
// (which may fail the message) followed by the insert into applied.
func newOrderedRig(t *testing.T, b *broker, hc consumer.HandlerConfig, maxDeliveries int, before func(ctx context.Context, key string, version int, msg consumer.Message) error, opts ...rigOption) *orderedRig {
	t.Helper()
	d := pgxDB(t, 12)
	d.migrateAll(t)
	d.exec(t, `CREATE TABLE applied (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, version int NOT NULL, msg_id text NOT NULL)`)
	r := &orderedRig{t: t, b: b, d: d}
	r.start(hc, maxDeliveries, before, opts...)
	return r
}

// rigOption changes the consumer's or the handler's configuration before
// the rig starts it.
type rigOption func(*consumer.Config, *consumer.HandlerConfig)

// batched makes the rig's handler a batched one, not Ordered.
func batched(size int) rigOption {
	return func(cfg *consumer.Config, hc *consumer.HandlerConfig) {
		cfg.Batch = consumer.BatchConfig{Size: size, Wait: 20 * time.Millisecond}
		hc.Ordered = false
	}
}

// start starts a consumer (another one, after a Stop) with the handler.
func (r *orderedRig) start(hc consumer.HandlerConfig, maxDeliveries int, before func(ctx context.Context, key string, version int, msg consumer.Message) error, opts ...rigOption) {
	t := r.t
	t.Helper()
	cfg := consumer.Config{Broker: r.b.sub, Concurrency: 8, BackoffBase: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, MaxDeliveries: maxDeliveries}
	hc.Ordered = true
	hc.Binding = r.b.binding("orders")
	for _, o := range opts {
		o(&cfg, &hc)
	}
	c, err := consumer.New(r.d.drv, cfg)
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c.HandleInbox(hc, func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
		key, v, _ := strings.Cut(string(msg.Payload), "/")
		version, err := strconv.Atoi(v)
		if err != nil {
			return consumer.Permanent(err)
		}
		if msg.Key != key {
			return consumer.Permanent(fmt.Errorf("message %s arrived with key %q, want %q", msg.ID, msg.Key, key))
		}
		if before != nil {
			if err := before(ctx, key, version, msg); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO applied (key, version, msg_id) VALUES ($1, $2, $3)`, key, version, msg.ID)
		return err
	}), "HandleInbox")
	testenv.Must(t, c.Start(context.Background()), "Start")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	r.c, r.hc = c, hc
}

// publish sends the given versions of key, in that order, one Publish
// call per message so that the broker's order is the call order.
func (r *orderedRig) publish(key string, versions ...int) {
	r.t.Helper()
	for _, v := range versions {
		id := fmt.Sprintf("%s-%s/%d", r.t.Name(), key, v)
		for _, err := range r.b.pub.Publish(context.Background(), []txbox.Message{{ID: id, Topic: r.b.topic("orders"), Key: key, Payload: []byte(key + "/" + strconv.Itoa(v))}}) {
			testenv.Must(r.t, err, "publish %s", id)
		}
	}
}

// versions returns key's applied versions in commit order.
func (r *orderedRig) versions(key string) []int {
	r.t.Helper()
	rows, err := r.d.drv.Pool().Query(context.Background(), `SELECT version FROM applied WHERE key = $1 ORDER BY id`, key)
	testenv.Must(r.t, err, "select applied")
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		testenv.Must(r.t, rows.Scan(&v), "scan")
		out = append(out, v)
	}
	return out
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func (r *orderedRig) waitVersions(key string, want []int) {
	r.t.Helper()
	progressing(r.t, time.Minute, fmt.Sprintf("key %s applied %v", key, want), func() (int64, bool, string) {
		got := r.versions(key)
		return int64(len(got)), len(got) >= len(want), fmt.Sprintf("applied %v", got)
	})
	if got := r.versions(key); fmt.Sprint(got) != fmt.Sprint(want) {
		r.t.Fatalf("key %s: applied versions %v, want %v", key, got, want)
	}
}

// TestOrderedSerialisesKeys: the messages of one key run one at a time in
// publication order; different keys run at the same time (the first
// message of each of 4 keys waits until all 4 are running at once, which
// a consumer serialising keys never reaches); unkeyed messages run too.
func TestOrderedSerialisesKeys(t *testing.T) {
	for _, br := range orderedBrokers {
		t.Run(br.name, func(t *testing.T) {
			t.Parallel()
			keys := []string{"a", "b", "c", "d"}
			const perKey = 15
			var (
				mu       sync.Mutex
				running  = map[string]int{}
				overlaps []string
				together atomic.Int32
				all      = make(chan struct{})
				once     sync.Once
			)
			r := newOrderedRig(t, br.make(t), consumer.HandlerConfig{Name: "ordered"}, 5, func(ctx context.Context, key string, version int, msg consumer.Message) error {
				if key == "" {
					return nil
				}
				mu.Lock()
				running[key]++
				if running[key] > 1 {
					overlaps = append(overlaps, msg.ID)
				}
				mu.Unlock()
				defer func() { mu.Lock(); running[key]--; mu.Unlock() }()
				if version == 1 {
					if together.Add(1) == int32(len(keys)) {
						once.Do(func() { close(all) })
					}
					// A consumer serialising keys never gets here for the
					// second key: nothing is applied, and waitVersions says so.
					select {
					case <-all:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				time.Sleep(time.Millisecond) // leave room for a second copy of the key to start, if the gate let it
				return nil
			})
			// The later versions are published once every key's first
			// message runs: a consumer queues at most its prefetch (16) of
			// the deliveries waiting behind running keys, and a fetch from a
			// partitioned broker (Kafka) may bring three keys' fifteen
			// versions before the fourth key's first, which would then never
			// reach the gate the other three wait at.
			for _, k := range keys {
				r.publish(k, 1)
			}
			eventually(t, "every key's first message running at once", func() bool {
				select {
				case <-all:
					return true
				default:
					return false
				}
			})
			for v := 2; v <= perKey; v++ {
				for _, k := range keys {
					r.publish(k, v)
				}
			}
			for _, k := range keys {
				r.waitVersions(k, seq(1, perKey))
			}
			// Unkeyed messages pass the gate.
			for i := 1; i <= 5; i++ {
				id := fmt.Sprintf("%s-free/%d", t.Name(), i)
				for _, err := range r.b.pub.Publish(context.Background(), []txbox.Message{{ID: id, Topic: r.b.topic("orders"), Payload: []byte("/" + strconv.Itoa(i))}}) {
					testenv.Must(t, err, "publish %s", id)
				}
			}
			eventually(t, "5 unkeyed messages applied", func() bool { return len(r.versions("")) == 5 })
			// A run is counted after its effects are recorded: wait for the count.
			want := int64(len(keys)*perKey + 5)
			eventually(t, "every run counted", func() bool { return r.c.Stats().Handled >= want })
			mu.Lock()
			defer mu.Unlock()
			if len(overlaps) > 0 {
				t.Fatalf("messages run while another message of their key ran: %v", overlaps)
			}
			if st := r.c.Stats(); st.DeadLettered != 0 || st.Handled != want {
				t.Fatalf("stats %+v: want %d handled, none dead-lettered", st, want)
			}
		})
	}
}

// TestOrderedFailureHoldsOnlyItsKey: a's version 2 fails (retried in
// process) until every message of b has been applied, then succeeds: b is
// not held back by it, and a's later versions do not overtake it.
func TestOrderedFailureHoldsOnlyItsKey(t *testing.T) {
	for _, br := range orderedBrokers {
		t.Run(br.name, func(t *testing.T) {
			t.Parallel()
			const perKey = 6
			var bDone atomic.Int32
			var failures atomic.Int32
			var deliveries []int
			var mu sync.Mutex
			r := newOrderedRig(t, br.make(t), consumer.HandlerConfig{Name: "ordered"}, 1_000_000, func(ctx context.Context, key string, version int, msg consumer.Message) error {
				if key == "a" && version == 2 {
					mu.Lock()
					deliveries = append(deliveries, msg.Deliveries)
					mu.Unlock()
					if bDone.Load() < perKey || failures.Load() < 2 {
						failures.Add(1)
						return errors.New("not yet")
					}
				}
				return nil
			})
			r.publish("a", seq(1, perKey)...)
			r.publish("b", seq(1, perKey)...)
			r.waitVersions("b", seq(1, perKey))
			// a/1 may come after b's messages; a/2 still fails (bDone is
			// not set), so a stops at [1], whatever b did meanwhile.
			r.waitVersions("a", []int{1})
			bDone.Store(perKey)
			r.waitVersions("a", seq(1, perKey))
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i < len(deliveries); i++ {
				if deliveries[i] != deliveries[i-1]+1 {
					t.Fatalf("a/2 saw delivery counts %v: want one more per in-process retry", deliveries)
				}
			}
			if st := r.c.Stats(); st.Retried < 2 || st.DeadLettered != 0 {
				t.Fatalf("stats %+v: want >= 2 retried, none dead-lettered", st)
			}
		})
	}
}

// TestOrderedDeadKey: a's version 2 fails permanently. By default its key
// is parked: a/3 and a/4 are dead-lettered unrun with ErrKeyParked while b
// flows; ParkedKeys and Stats show it; after ReleaseKey, a/5 runs. With
// ContinueKey, a/3 and a/4 run.
func TestOrderedDeadKey(t *testing.T) {
	for _, br := range orderedBrokers {
		for _, policy := range []consumer.DeadKeyPolicy{consumer.ParkKey, consumer.ContinueKey} {
			t.Run(br.name+"/"+policy.String(), func(t *testing.T) {
				t.Parallel()
				b := br.make(t)
				r := newOrderedRig(t, b, consumer.HandlerConfig{Name: "ordered", DeadKey: policy}, 5, func(ctx context.Context, key string, version int, msg consumer.Message) error {
					if key == "a" && version == 2 {
						return consumer.Permanent(errors.New("poison"))
					}
					return nil
				})
				r.publish("a", 1, 2, 3, 4)
				r.publish("b", 1, 2, 3)
				r.waitVersions("b", seq(1, 3))
				id := func(v int) string { return fmt.Sprintf("%s-a/%d", t.Name(), v) }
				if policy == consumer.ContinueKey {
					r.waitVersions("a", []int{1, 3, 4})
					if pk := r.c.ParkedKeys(); len(pk) != 0 {
						t.Fatalf("ContinueKey parked %+v", pk)
					}
					eventually(t, "a/2 dead-lettered", func() bool { return b.deadLetters(t, "orders")[id(2)] != nil })
					return
				}
				eventually(t, "a/2, a/3, a/4 dead-lettered", func() bool { return r.c.Stats().DeadLettered == 3 })
				if got := r.versions("a"); fmt.Sprint(got) != "[1]" {
					t.Fatalf("parked key a applied %v, want [1]", got)
				}
				pk := r.c.ParkedKeys()
				if len(pk) != 1 || pk[0].Handler != "ordered" || pk[0].Key != "a" || pk[0].MessageID != id(2) || pk[0].DeadLettered != 2 || !strings.Contains(pk[0].Cause, "poison") {
					t.Fatalf("ParkedKeys %+v: want key a parked by %s with 2 dead-lettered behind it", pk, id(2))
				}
				if st := r.c.Stats(); st.ParkedKeys != 1 || st.ParkedDeadLettered != 2 {
					t.Fatalf("stats %+v: want ParkedKeys 1, ParkedDeadLettered 2", st)
				}
				var dl map[string]map[string]string
				eventually(t, "3 dead letters on the broker", func() bool { dl = b.deadLetters(t, "orders"); return len(dl) == 3 })
				if e := dl[id(2)][b.errHeader]; !strings.Contains(e, "poison") {
					t.Fatalf("a/2's dead letter error %q, want poison", e)
				}
				for _, v := range []int{3, 4} {
					if e := dl[id(v)][b.errHeader]; !strings.Contains(e, "parked") || !strings.Contains(e, id(2)) {
						t.Fatalf("a/%d's dead letter error %q, want parked behind %s", v, e, id(2))
					}
				}
				testenv.Must(t, r.c.ReleaseKey("ordered", "a"), "ReleaseKey")
				if err := r.c.ReleaseKey("ordered", "a"); !errors.Is(err, consumer.ErrNotParked) {
					t.Fatalf("second ReleaseKey: %v, want ErrNotParked", err)
				}
				r.publish("a", 5)
				r.waitVersions("a", []int{1, 5})
				if st := r.c.Stats(); st.ParkedKeys != 0 {
					t.Fatalf("stats %+v after release: want ParkedKeys 0", st)
				}
			})
		}
	}
}

// An Ordered handler whose message a/2 breaks its own commit (a deferred
// constraint trigger refuses it at COMMIT, SQLSTATE 23514), with
// MaxDeliveries 2: a/2 fails twice for its own reasons and is
// dead-lettered, key a is parked (a/3 dead-lettered behind it), key b
// flows; no failure is a database failure.
func TestOrderedCommitFailureParksKey(t *testing.T) {
	t.Parallel()
	b := natsBroker(t, testenv.NATS(t), 5*time.Second)
	var runs runCounter
	r := newOrderedRig(t, b, consumer.HandlerConfig{Name: "ordered"}, 2, func(ctx context.Context, key string, version int, msg consumer.Message) error {
		runs.add(fmt.Sprintf("%s/%d", key, version))
		return nil
	})
	r.d.exec(t, `CREATE FUNCTION refuse_a2() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.key = 'a' AND NEW.version = 2 THEN
		RAISE EXCEPTION 'a/2 is refused at commit' USING ERRCODE = 'check_violation';
	END IF;
	RETURN NULL;
END $$`)
	r.d.exec(t, `CREATE CONSTRAINT TRIGGER refuse_a2 AFTER INSERT ON applied DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION refuse_a2()`)
	r.publish("a", 1, 2, 3)
	r.publish("b", 1, 2, 3)
	progressing(t, 30*time.Second, "b applied, a/2 and a/3 dead-lettered", func() (int64, bool, string) {
		st := r.c.Stats()
		return st.Handled + st.DeadLettered + 1000*st.DatabaseFailures, st.Handled == 4 && st.DeadLettered == 2 || st.DatabaseFailures > 0,
			fmt.Sprintf("stats %+v, a/2 ran %d times", st, runs.get("a/2"))
	})
	st := r.c.Stats()
	t.Logf("stats %+v; a/2 ran %d times", st, runs.get("a/2"))
	if st.DatabaseFailures != 0 {
		t.Fatalf("stats %+v: a commit refused for the message's data counted as a database failure", st)
	}
	if got := r.versions("b"); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("key b applied %v, want [1 2 3]", got)
	}
	if got := r.versions("a"); fmt.Sprint(got) != "[1]" {
		t.Fatalf("parked key a applied %v, want [1]", got)
	}
	if st.ParkedKeys != 1 || st.ParkedDeadLettered != 1 || runs.get("a/2") != 2 {
		t.Fatalf("stats %+v, a/2 ran %d times: want key a parked by a/2 after 2 runs, a/3 dead-lettered behind it", st, runs.get("a/2"))
	}
}

// TestOrderedStopAndRestart: a consumer stopped with a key's message in
// flight and its later ones queued in its gate and in the broker's prefetch
// releases them, in flight one included once Stop's deadline cancels it, so
// that the next consumer runs them in order: the key's versions apply as
// 1…40, each once. Version 6 holds its worker until Stop's deadline, so
// exactly 5 are handled before Stop whatever the machine's speed.
func TestOrderedStopAndRestart(t *testing.T) {
	for _, br := range []struct {
		name string
		make func(t *testing.T) *broker
	}{
		{"nats", func(t *testing.T) *broker {
			b := natsBroker(t, testenv.NATS(t), 2*time.Second)
			b.sub = b.resubscribe(t)
			return b
		}},
		{"rabbitmq", func(t *testing.T) *broker { u := testenv.RabbitMQ(t); return rabbitBroker(t, u, u) }},
	} {
		t.Run(br.name, func(t *testing.T) {
			t.Parallel()
			published, held := make(chan struct{}), make(chan struct{})
			var holdOnce sync.Once
			first := func(ctx context.Context, key string, version int, msg consumer.Message) error {
				<-published // the gate and the prefetch fill up meanwhile
				if version == 6 {
					holdOnce.Do(func() { close(held) })
					<-ctx.Done() // held until Stop's deadline cancels it
					return ctx.Err()
				}
				return nil
			}
			r := newOrderedRig(t, br.make(t), consumer.HandlerConfig{Name: "ordered"}, 5, first)
			r.publish("a", seq(1, 40)...)
			close(published)
			eventually(t, "version 6 running", func() bool {
				select {
				case <-held:
					return true
				default:
					return false
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			err := r.c.Stop(ctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Stop: %v, want %v (version 6 was cancelled)", err, context.DeadlineExceeded)
			}
			st := r.c.Stats()
			t.Logf("stats at Stop: %+v", st)
			if st.Handled != 5 || st.Released == 0 {
				t.Fatalf("stats %+v: want Handled 5 (versions 1…5) and version 6 at least released at Stop", st)
			}
			if r.b.resubscribe != nil {
				r.b.sub = r.b.resubscribe(t)
			}
			r.start(r.hc, 5, func(ctx context.Context, key string, version int, msg consumer.Message) error {
				time.Sleep(5 * time.Millisecond)
				return nil
			})
			r.waitVersions("a", seq(1, 40))
		})
	}
}

// TestOrderedRetriesFreeTheirWorkers: with 2 workers and 3 keys whose
// message fails until a fourth key is done, the fourth key still flows: a
// message waiting for its retry holds its key, not a worker. (It does hold
// one of the prefetch's 2 × Concurrency unacknowledged deliveries: the 3
// failing messages leave one for the fourth key.)
func TestOrderedRetriesFreeTheirWorkers(t *testing.T) {
	for _, br := range orderedBrokers[:2] {
		t.Run(br.name, func(t *testing.T) {
			t.Parallel()
			var bDone atomic.Bool
			r := newOrderedRig(t, br.make(t), consumer.HandlerConfig{Name: "ordered", Concurrency: 2}, 1_000_000, func(ctx context.Context, key string, version int, msg consumer.Message) error {
				if key != "b" && version == 1 && !bDone.Load() {
					return errors.New("not yet")
				}
				return nil
			})
			for _, k := range []string{"a", "c", "e"} {
				r.publish(k, 1)
			}
			r.publish("b", seq(1, 6)...)
			r.waitVersions("b", seq(1, 6))
			for _, k := range []string{"a", "c", "e"} {
				if got := r.versions(k); len(got) != 0 {
					t.Fatalf("key %s applied %v while its first message fails", k, got)
				}
			}
			bDone.Store(true)
			for _, k := range []string{"a", "c", "e"} {
				r.waitVersions(k, []int{1})
			}
		})
	}
}

// TestOrderedFailingKeyDoesNotStallOthers: a/2 keeps failing (retried in
// process) while a's 38 later messages, more than the consumer's window
// (its prefetch, 16 unsettled deliveries) holds, arrive; then b's. With
// the window full of key a, no other key would get a delivery until a/2
// reached MaxDeliveries; so the gate sets key a aside: a/2 is
// dead-lettered with a *KeyHeldError naming its failure, key a is parked,
// its later messages are dead-lettered behind it, and b runs all its
// messages. Nothing of a runs out of order or twice and nothing is lost: a
// ran version 1, its dead letters hold exactly 2…40.
func TestOrderedFailingKeyDoesNotStallOthers(t *testing.T) {
	for _, br := range orderedBrokers {
		t.Run(br.name, func(t *testing.T) {
			t.Parallel()
			const aCount, bCount = 40, 10
			var bDone, failures atomic.Int32
			b := br.make(t)
			r := newOrderedRig(t, b, consumer.HandlerConfig{Name: "ordered"}, 1_000_000, func(ctx context.Context, key string, version int, msg consumer.Message) error {
				if key == "a" && version == 2 && bDone.Load() == 0 {
					failures.Add(1)
					return errors.New("not yet")
				}
				return nil
			})
			// b is published once a/2 fails: the consumer has nothing but
			// a's messages to fill its window with (on Kafka, b's partition
			// could otherwise be fetched first).
			r.publish("a", seq(1, aCount)...)
			eventually(t, "a/2 failing", func() bool { return failures.Load() > 0 })
			r.publish("b", seq(1, bCount)...)
			r.waitVersions("b", seq(1, bCount))
			bDone.Store(1)
			id := func(v int) string { return fmt.Sprintf("%s-a/%d", t.Name(), v) }
			var dl map[string]map[string]string
			progressing(t, time.Minute, "a/2…a/40 dead-lettered", func() (int64, bool, string) {
				dl = b.deadLetters(t, "orders")
				return int64(len(dl)), len(dl) >= aCount-1, fmt.Sprintf("%d dead letters", len(dl))
			})
			if got := r.versions("a"); fmt.Sprint(got) != "[1]" {
				t.Fatalf("key a applied %v, want [1]", got)
			}
			if len(dl) != aCount-1 {
				t.Fatalf("%d dead letters, want a/2…a/%d", len(dl), aCount)
			}
			if e := dl[id(2)][b.errHeader]; !strings.Contains(e, "set aside") || !strings.Contains(e, "not yet") {
				t.Fatalf("a/2's dead letter error %q, want set aside with its failure", e)
			}
			for v := 3; v <= aCount; v++ {
				if e := dl[id(v)][b.errHeader]; !strings.Contains(e, "parked") || !strings.Contains(e, id(2)) {
					t.Fatalf("a/%d's dead letter error %q, want parked behind %s", v, e, id(2))
				}
			}
			pk := r.c.ParkedKeys()
			if len(pk) != 1 || pk[0].Key != "a" || pk[0].MessageID != id(2) || pk[0].DeadLettered != aCount-2 || !strings.Contains(pk[0].Cause, "set aside") {
				t.Fatalf("ParkedKeys %+v: want key a parked by %s with %d dead-lettered behind it", pk, id(2), aCount-2)
			}
			testenv.Must(t, r.c.ReleaseKey("ordered", "a"), "ReleaseKey")
			r.publish("a", aCount+1)
			r.waitVersions("a", []int{1, aCount + 1})
		})
	}
}

// TestBatchedFailingKeyDoesNotStallOthers: the same load on a batched
// (not Ordered) inbox handler: a/2 fails until b is done while a's 58
// later messages, more than the prefetch (32), arrive ahead of b's. A
// batched handler gives a failed message back to the broker for its retry
// (it keeps only the keys of the batch it runs, keyLanes), so a's later
// messages are not held behind it and b completes; then every message of
// a is applied, once.
func TestBatchedFailingKeyDoesNotStallOthers(t *testing.T) {
	for _, br := range orderedBrokers {
		t.Run(br.name, func(t *testing.T) {
			t.Parallel()
			const aCount, bCount = 60, 10
			var bDone atomic.Int32
			r := newOrderedRig(t, br.make(t), consumer.HandlerConfig{Name: "batched"}, 1_000_000, func(ctx context.Context, key string, version int, msg consumer.Message) error {
				if key == "a" && version == 2 && bDone.Load() == 0 {
					return errors.New("not yet")
				}
				return nil
			}, batched(4))
			r.publish("a", seq(1, aCount)...)
			r.publish("b", seq(1, bCount)...)
			progressing(t, time.Minute, "b applied", func() (int64, bool, string) {
				got := r.versions("b")
				return int64(len(got)), len(got) >= bCount, fmt.Sprintf("applied %v", got)
			})
			bDone.Store(1)
			progressing(t, time.Minute, "a applied", func() (int64, bool, string) {
				got := r.versions("a")
				return int64(len(got)), len(got) >= aCount, fmt.Sprintf("%d applied", len(got))
			})
			for k, n := range map[string]int{"a": aCount, "b": bCount} {
				got := r.versions(k)
				sort.Ints(got)
				if fmt.Sprint(got) != fmt.Sprint(seq(1, n)) {
					t.Fatalf("key %s applied %v, want 1…%d once each", k, got, n)
				}
			}
		})
	}
}
