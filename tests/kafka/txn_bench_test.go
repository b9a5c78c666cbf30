package kafka_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// TestDrainTransactionsVsIdempotent measures a relay's drain rate into
// kfake with the transactional Publisher against the idempotent one, side
// by side: for each shape (no keys; 1,000 keys; 16 keys, whose batches
// hold several messages of a key and are published in waves, one
// transaction each) and batch size (100, 1,000), pairs of drains of the
// same backlog, the order alternating per pair.
// A measurement, not a check: it asserts nothing and runs only with
// TXBOX_BENCH=kafka (docs/benchmarks/2026-12-07-kafka-transactions.md has
// the figures):
//
//	TXBOX_BENCH=kafka CI=true go test -count=1 -run TestDrainTransactionsVsIdempotent -v ./kafka/
//
// TXBOX_BENCH_ROWS (default 20000; a tenth of it with 16 keys, which
// drain slower in both modes) and TXBOX_BENCH_PAIRS (default 3) set the
// backlog and the pairs per cell; TXBOX_BENCH_KEYS (default "0,1000,16")
// the shapes; TXBOX_BENCH_LINGER a kgo.ProducerLinger for both modes
// (franz-go's default is 10ms; Publish flushes, so it does not wait it out). The relay, kfake and the test run
// in one process, on the machine's shared cores: the figures are kfake's,
// not Kafka's, where a transaction's commit costs network round trips to
// the coordinator and markers written to replicated partitions.
func TestDrainTransactionsVsIdempotent(t *testing.T) {
	if os.Getenv("TXBOX_BENCH") != "kafka" {
		t.Skip("a measurement: set TXBOX_BENCH=kafka to run it")
	}
	rows, pairs := 20000, 3
	if v := os.Getenv("TXBOX_BENCH_ROWS"); v != "" {
		rows, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("TXBOX_BENCH_PAIRS"); v != "" {
		pairs, _ = strconv.Atoi(v)
	}
	shapes := []int{0, 1000, 16}
	if v := os.Getenv("TXBOX_BENCH_KEYS"); v != "" {
		shapes = nil
		for _, k := range strings.Split(v, ",") {
			n, err := strconv.Atoi(k)
			testenv.Must(t, err, "TXBOX_BENCH_KEYS")
			shapes = append(shapes, n)
		}
	}
	baseRows := rows
	for _, keys := range shapes {
		rows := baseRows
		if keys == 16 {
			rows = max(baseRows/10, 1)
		}
		for _, batch := range []int{100, 1000} {
			var ratios []float64
			var rates [2][]float64
			for pair := range pairs {
				order := []bool{false, true}
				if pair%2 == 1 {
					order = []bool{true, false}
				}
				var took [2]time.Duration
				for _, txn := range order {
					var d time.Duration
					// A subtest of its own: its schema and pool are gone
					// before the next drain.
					t.Run(fmt.Sprintf("keys=%d/batch=%d/pair=%d/txn=%v", keys, batch, pair+1, txn), func(t *testing.T) {
						d = drainKafka(t, rows, batch, keys, txn)
					})
					if d == 0 {
						t.FailNow()
					}
					i := 0
					if txn {
						i = 1
					}
					took[i] = d
					rates[i] = append(rates[i], float64(rows)/d.Seconds())
				}
				r := took[0].Seconds() / took[1].Seconds() // transactional ÷ idempotent drain rate
				ratios = append(ratios, r)
				t.Logf("kfake, keys %d, batch %d, pair %d (%s first): idempotent %.0f rows/s, transactional %.0f rows/s: %.2f",
					keys, batch, pair+1, map[bool]string{false: "idempotent", true: "transactional"}[order[0]],
					float64(rows)/took[0].Seconds(), float64(rows)/took[1].Seconds(), r)
			}
			t.Logf("kfake, keys %d, batch %d, %d rows, %d pairs: median idempotent %.0f rows/s, transactional %.0f rows/s; transactional ÷ idempotent median %.2f (pairs %s)",
				keys, batch, rows, pairs, median(rates[0]), median(rates[1]), median(ratios), fmtRatios(ratios))
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtRatios(xs []float64) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%.2f", x)
	}
	return out
}

// drainKafka fills a new outbox with rows messages (over keys keys, or
// none) and returns how long a relay of batch rows per claim takes to
// publish them all into a new kfake cluster.
func drainKafka(t *testing.T, rows, batch, keys int, txn bool) time.Duration {
	t.Helper()
	ctx := context.Background()
	pool, _ := testenv.Postgres(t, 8)
	drv := txboxpgx.New(pool)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	for done := 0; done < rows; {
		n := min(1000, rows-done)
		msgs := make([]txbox.Message, n)
		for i := range msgs {
			msgs[i] = txbox.Message{Topic: "orders", Payload: []byte(`{"order":` + strconv.Itoa(done+i) + `}`)}
			if keys > 0 {
				msgs[i].Key = "k" + strconv.Itoa((done+i)%keys)
			}
		}
		_, err := ob.AddNoTx(ctx, msgs...)
		testenv.Must(t, err, "add")
		done += n
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench.orders"))
	testenv.Must(t, err, "kfake")
	defer c.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	if v := os.Getenv("TXBOX_BENCH_LINGER"); v != "" {
		d, err := time.ParseDuration(v)
		testenv.Must(t, err, "TXBOX_BENCH_LINGER")
		opts = append(opts, kgo.ProducerLinger(d))
	}
	if txn {
		opts = append(opts, kgo.TransactionalID(testenv.Name("bench")))
	}
	cl, err := kgo.NewClient(opts...)
	testenv.Must(t, err, "client")
	defer cl.Close()
	pub, err := txboxkafka.NewPublisher(cl, txboxkafka.PublisherConfig{Prefix: "bench."})
	testenv.Must(t, err, "publisher")
	r, err := relay.New[pgx.Tx](drv, pub, relay.Config{BatchSize: batch, PollInterval: 10 * time.Millisecond})
	testenv.Must(t, err, "relay.New")
	start := time.Now()
	testenv.Must(t, r.Start(ctx), "start relay")
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = r.Stop(sctx)
	}()
	last, since := -1, time.Now()
	for {
		var n int
		testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL").Scan(&n), "pending")
		if n == 0 {
			return time.Since(start)
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > time.Minute {
			t.Fatalf("%d rows pending, no change for a minute", n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
