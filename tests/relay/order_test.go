package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// streamPayloads returns the payloads of s in stream order.
func streamPayloads(t *testing.T, s jetstream.Stream) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := streamMsgs(t, s)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err, "consumer")
	var out []string
	for uint64(len(out)) < n {
		batch, err := c.Fetch(int(n)-len(out), jetstream.FetchMaxWait(time.Second))
		testenv.Must(t, err, "fetch")
		for m := range batch.Messages() {
			out = append(out, string(m.Data()))
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d", len(out), n)
		}
	}
	return out
}

// keyOrder returns, per key prefix ("A" of "A3"), the payloads in order.
func keyOrder(payloads []string) map[string]string {
	out := map[string]string{}
	for _, p := range payloads {
		k := p[:1]
		out[k] += p[1:]
	}
	return out
}

// A dead message parks only its own key; redrive releases the key in order,
// discard skips the dead message and releases the rest in order.
func TestDeadMessageParksOnlyItsKey(t *testing.T) {
	t.Parallel()
	for _, action := range []string{"redrive", "discard"} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			eachDriver(t, func(t *testing.T, f fixture) {
				nc := testenv.NATS(t)
				prefix := testenv.Subject()
				s := stream(t, nc, prefix, jetstream.StreamConfig{MaxMsgSize: 1024})
				big := strings.Repeat("x", 2000)
				msg := func(key, payload string) txbox.Message {
					return txbox.Message{Topic: prefix + "o", Key: key, Payload: []byte(payload)}
				}
				f.add(t, true, msg("A", "A1"), msg("B", "B1"), msg("A", "A2"+big), msg("B", "B2"))
				f.add(t, true, msg("A", "A3"), msg("B", "B3"), msg("C", "C1"))
				f.add(t, true, msg("A", "A4"))

				r := f.newRelay(t, publisher(t, nc), relaytest.With(relay.Config{PollInterval: 5 * time.Millisecond, MaxAttempts: 2}, relaytest.Config{RetryDelay: time.Millisecond}))
				startRelay(t, r)
				eventually(t, "A2 dead, A3 and A4 parked, the other keys delivered", func() bool {
					st, err := r.Stats(context.Background())
					return err == nil && st.DeadRows == 1 && st.Parked == 2 && streamMsgs(t, s) == 5
				})
				got := keyOrder(streamPayloads(t, s))
				if got["A"] != "1" || got["B"] != "123" || got["C"] != "1" {
					t.Fatalf("delivered per key %v, want A:1 B:123 C:1", got)
				}

				l := f.dead(t)
				ctx := context.Background()
				list, err := l.List(ctx, 10)
				testenv.Must(t, err, "list dead")
				if len(list) != 1 || list[0].Key != "A" || list[0].Parked != 2 || list[0].Attempts != 2 || !strings.Contains(list[0].LastError, "maximum") {
					t.Fatalf("dead list = %+v", list)
				}
				want := "1234"
				if action == "redrive" {
					js, _ := jetstream.New(nc)
					cfg := s.CachedInfo().Config
					cfg.MaxMsgSize = 1 << 20
					_, err := js.UpdateStream(ctx, cfg)
					testenv.Must(t, err, "raise the stream's size limit")
					n, err := l.Redrive(ctx, list[0].Seq)
					testenv.Must(t, err, "redrive")
					if n != 1 {
						t.Fatalf("redrove %d", n)
					}
				} else {
					n, err := l.Discard(ctx, list[0].Seq)
					testenv.Must(t, err, "discard")
					if n != 1 {
						t.Fatalf("discarded %d", n)
					}
					want = "134"
				}
				r.Wake()
				eventually(t, "key A released", func() bool { return pending(t, r) == 0 })
				got = keyOrder(streamPayloads(t, s))
				if strings.ReplaceAll(got["A"], big, "") != want {
					t.Fatalf("key A delivered %q after %s, want %q", got["A"], action, want)
				}
			})
		})
	}
}

// Two transactions adding the same key: the second waits at Add until the
// first ends, so its message gets the later id whatever order the two would
// otherwise have committed in.
func TestSameKeyTransactionsSerialise(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	ctx := context.Background()
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})

	first, err := f.pool.Begin(ctx)
	testenv.Must(t, err, "begin first")
	testenv.Must(t, testenv.Err(f.outbox.Add(ctx, first, txbox.Message{Topic: prefix + "k", Key: "K", Payload: []byte("K1")})), "add first")

	second, err := f.pool.Begin(ctx)
	testenv.Must(t, err, "begin second")
	var pid uint32
	testenv.Must(t, second.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid), "pid")
	added := make(chan error, 1)
	go func() {
		added <- testenv.Err(f.outbox.Add(ctx, second, txbox.Message{Topic: prefix + "k", Key: "K", Payload: []byte("K2")}))
	}()
	// The second Add waits on the key's advisory lock held by the first.
	eventually(t, "second Add waits on the key lock", func() bool {
		var waiting bool
		err := f.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)", pid).Scan(&waiting)
		return err == nil && waiting
	})
	select {
	case err := <-added:
		t.Fatalf("second Add returned while the first transaction held the key: %v", err)
	default:
	}
	testenv.Must(t, first.Commit(ctx), "commit first")
	testenv.Must(t, <-added, "add second")
	testenv.Must(t, second.Commit(ctx), "commit second")

	r := f.newRelay(t, publisher(t, nc), relay.Config{PollInterval: 5 * time.Millisecond})
	startRelay(t, r)
	eventually(t, "delivered", func() bool { return pending(t, r) == 0 })
	if got := strings.Join(streamPayloads(t, s), ","); got != "K1,K2" {
		t.Fatalf("delivered %s, want K1,K2", got)
	}
}

// The ordering torture test: 8 producers increment per-aggregate versions
// (50 aggregates) in the same transaction as Add, at random; 3 relays run and
// are killed and restarted at random; every aggregate's versions must reach
// the broker as 1, 2, 3, … with none missing and none out of order.
func TestOrderingTorture(t *testing.T) {
	t.Parallel()
	const (
		aggregates = 50
		producers  = 8
		perProd    = 250
	)
	f := pgxFixture(t, 16)
	ctx := context.Background()
	_, err := f.pool.Exec(ctx, "CREATE TABLE aggregates (id int PRIMARY KEY, version int NOT NULL)")
	testenv.Must(t, err, "create aggregates")
	_, err = f.pool.Exec(ctx, "INSERT INTO aggregates SELECT g, 0 FROM generate_series(1, $1) g", aggregates)
	testenv.Must(t, err, "fill aggregates")
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	schema := f.schema(t)

	// Relays come and go; each has its own pool, closed under it to kill
	// it abruptly (its claim transaction dies with the connection).
	stopRelays := make(chan struct{})
	var relaysWG sync.WaitGroup
	var kills atomic.Int64
	for i := 0; i < 3; i++ {
		relaysWG.Add(1)
		go func(seed uint64) {
			defer relaysWG.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for {
				pool := relayPool(t, schema)
				r, err := relay.New[pgx.Tx](txboxpgx.New(pool), publisher(t, nc), relay.Config{PollInterval: 2 * time.Millisecond, BatchSize: 20})
				testenv.Must(t, err, "relay")
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { _ = runUntilStopped(rctx, r); close(done) }()
				select {
				case <-stopRelays:
					cancel()
					<-done
					pool.Close()
					return
				case <-time.After(time.Duration(20+rng.IntN(200)) * time.Millisecond):
				}
				// Let each incarnation get some work done before it dies,
				// however slow the machine: otherwise nothing progresses.
				for wait := 0; testenv.RelayStats(r).Published == 0 && wait < 200; wait++ {
					time.Sleep(5 * time.Millisecond)
				}
				// Kill: the pool goes first, so marks in flight fail.
				pool.Reset()
				cancel()
				<-done
				pool.Close()
				kills.Add(1)
			}
		}(uint64(i))
	}

	produceVersions(ctx, t, f, prefix+"agg", producers, perProd, aggregates)
	eventually(t, "all delivered", func() bool {
		return f.count(t, "published_at IS NULL") == 0
	})
	close(stopRelays)
	relaysWG.Wait()
	if kills.Load() == 0 {
		t.Fatal("no relay was killed")
	}

	payloads := streamPayloads(t, s)
	checkVersionOrder(t, payloads, producers*perProd)
	t.Logf("%d messages, %d relay kills, per-key order held", len(payloads), kills.Load())
}

// produceVersions runs producers goroutines, each committing perProd
// transactions that bump a random aggregate's version and add a message
// keyed by the aggregate whose payload is "aggregate:version".
func produceVersions(ctx context.Context, t *testing.T, f fixture, topic string, producers, perProd, aggregates int) {
	t.Helper()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 99))
			for i := 0; i < perProd; i++ {
				agg := 1 + rng.IntN(aggregates)
				err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
					var v int
					if err := tx.QueryRow(ctx, "UPDATE aggregates SET version = version + 1 WHERE id = $1 RETURNING version", agg).Scan(&v); err != nil {
						return err
					}
					return testenv.Err(f.outbox.Add(ctx, tx, txbox.Message{Topic: topic, Key: strconv.Itoa(agg), Payload: []byte(fmt.Sprintf("%d:%d", agg, v))}))
				})
				if err != nil {
					t.Errorf("producer: %v", err)
					return
				}
			}
		}(uint64(p))
	}
	wg.Wait()
}

// checkVersionOrder fails t unless the "aggregate:version" payloads give
// each aggregate's versions 1, 2, 3, … in order, want versions in all.
func checkVersionOrder(t *testing.T, payloads []string, want int) {
	t.Helper()
	next := map[string]int{}
	for _, p := range payloads {
		agg, v, _ := strings.Cut(p, ":")
		n, _ := strconv.Atoi(v)
		if n != next[agg]+1 {
			t.Fatalf("aggregate %s: version %d arrived after %d", agg, n, next[agg])
		}
		next[agg] = n
	}
	total := 0
	for _, v := range next {
		total += v
	}
	if total != want || len(payloads) != total {
		t.Fatalf("received %d messages covering %d versions, want %d", len(payloads), total, want)
	}
}

func relayPool(t *testing.T, schema string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	testenv.Must(t, err, "parse")
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	testenv.Must(t, err, "pool")
	return pool
}
