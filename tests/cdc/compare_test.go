package cdc_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// counter is a no-op publisher that counts acks and keeps each message's
// commit-to-ack time (from created_at, the database's clock).
type counter struct {
	mu    sync.Mutex
	n     int
	lat   []time.Duration
	done  chan struct{}
	until int
}

func (c *counter) Publish(_ context.Context, msgs []txbox.Message) []error {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		c.lat = append(c.lat, now.Sub(m.CreatedAt))
	}
	c.n += len(msgs)
	if c.done != nil && c.n >= c.until {
		close(c.done)
		c.done = nil
	}
	return nil
}

func (c *counter) reset(until int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n, c.lat, c.until = 0, nil, until
	c.done = make(chan struct{})
	return c.done
}

// mode is one relay under comparison.
type mode struct {
	name  string
	start func(t *testing.T, pool *pgxpool.Pool, pub txbox.Publisher) (stop func())
}

var modes = []mode{
	{"polling", func(t *testing.T, pool *pgxpool.Pool, pub txbox.Publisher) func() {
		r, err := relay.New(txboxpgx.New(pool), pub, relay.Config{BatchSize: 500})
		testenv.Must(t, err, "relay.New")
		testenv.Must(t, r.Start(context.Background()), "start")
		return func() { _ = r.Stop(context.Background()) }
	}},
	{"cdc", func(t *testing.T, pool *pgxpool.Pool, pub txbox.Publisher) func() {
		r, err := cdc.New(pool, pub, cdc.Config{BatchSize: 500})
		testenv.Must(t, err, "cdc.New")
		testenv.Must(t, r.Start(context.Background()), "start")
		return func() { _ = r.Stop(context.Background()) }
	}},
}

// fresh empties the table and makes a new slot at the current WAL
// position, so that each run starts alike.
func fresh(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	// A stopped relay's walsender exits a moment after its connection.
	eventually(t, "the slot dropped", func() (bool, string) {
		err := cdc.DropSlot(ctx, pool, cdc.Config{})
		return err == nil, fmt.Sprint(err)
	})
	_, err := pool.Exec(ctx, `TRUNCATE txbox_outbox; CHECKPOINT`)
	testenv.Must(t, err, "truncate")
	_, err = cdc.CreateSlot(ctx, pool, cdc.Config{})
	testenv.Must(t, err, "create slot")
}

// The log-based relay beside the polling relay on one private server, runs
// interleaved (polling, cdc, polling, cdc …): the drain of a backlog into
// a no-op publisher, and commit-to-ack latency at an offered rate. It
// prints figures and asserts none; it runs only with TXBOX_CDC_BENCH=1:
//
//	TXBOX_CDC_BENCH=1 go test -count=1 -run TestCompareWithPollingRelay -v ./cdc/
//
// TXBOX_CDC_BENCH_ROWS (default 50000), TXBOX_CDC_BENCH_REPS (default 3),
// TXBOX_CDC_BENCH_RATE (events/s, default 1000) and
// TXBOX_CDC_BENCH_SECONDS (default 5) change the sizes.
func TestCompareWithPollingRelay(t *testing.T) {
	if os.Getenv("TXBOX_CDC_BENCH") != "1" {
		t.Skip("a benchmark: set TXBOX_CDC_BENCH=1")
	}
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	rows, reps := env("TXBOX_CDC_BENCH_ROWS", 50000), env("TXBOX_CDC_BENCH_REPS", 3)
	rate, seconds := env("TXBOX_CDC_BENCH_RATE", 1000), env("TXBOX_CDC_BENCH_SECONDS", 5)
	_, pool := logicalCluster(t)
	ctx := context.Background()
	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	payload := []byte(`{"order_id":123456,"customer":"c-42","items":[{"sku":"tea","qty":2}],"total_cents":1999}`)

	fill := func() {
		var batch []txbox.Message
		for i := range rows {
			batch = append(batch, txbox.Message{Topic: "bench.orders", Payload: payload})
			if len(batch) == 1000 || i == rows-1 {
				testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, batch...)), "add")
				batch = batch[:0]
			}
		}
	}
	drain := map[string][]float64{}
	p50 := map[string][]time.Duration{}
	p99 := map[string][]time.Duration{}
	for rep := range reps {
		for _, m := range modes {
			// Drain: rows queued first, then the relay started.
			fresh(t, pool)
			fill()
			c := &counter{}
			done := c.reset(rows)
			cpu := processCPU()
			began := time.Now()
			stop := m.start(t, pool, c)
			<-done
			el := time.Since(began)
			cpu = processCPU() - cpu
			ws := walsenderCPU(t, pool)
			stop()
			drain[m.name] = append(drain[m.name], float64(rows)/el.Seconds())
			t.Logf("rep %d %-7s drain %d rows in %s: %.0f msg/s (CPU: this process %s, walsender %s)", rep+1, m.name, rows, el.Round(time.Millisecond), float64(rows)/el.Seconds(),
				cpu.Round(10*time.Millisecond), ws)
			if m.name == "cdc" {
				// The stream alone: the slot read to its end, nothing decoded
				// nor published; what the walsender delivers bounds the relay.
				fresh(t, pool)
				fill()
				el, ws := rawStream(t, pool, rows)
				drain["stream"] = append(drain["stream"], float64(rows)/el.Seconds())
				t.Logf("rep %d stream  %d inserts in %s: %.0f msg/s (CPU: walsender %s)", rep+1, rows, el.Round(time.Millisecond), float64(rows)/el.Seconds(), ws)
			}

			// Latency: one message per transaction at the offered rate.
			fresh(t, pool)
			c = &counter{}
			total := rate * seconds / 8 * 8
			done = c.reset(total)
			stop = m.start(t, pool, c)
			time.Sleep(200 * time.Millisecond) // the relay's start
			// Eight writers, each at an eighth of the rate.
			const nw = 8
			wrote := time.Now()
			var wg sync.WaitGroup
			for range nw {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(time.Second * nw / time.Duration(rate))
					defer tick.Stop()
					for range total / nw {
						<-tick.C
						if _, err := ob.AddNoTx(ctx, txbox.Message{Topic: "bench.orders", Payload: payload}); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			achieved := float64(total) / time.Since(wrote).Seconds()
			<-done
			stop()
			c.mu.Lock()
			lat := slices.Clone(c.lat)
			c.mu.Unlock()
			slices.Sort(lat)
			a, b := lat[len(lat)/2], lat[len(lat)*99/100]
			p50[m.name], p99[m.name] = append(p50[m.name], a), append(p99[m.name], b)
			t.Logf("rep %d %-7s latency at %d/s offered (%.0f/s written): p50 %s p99 %s", rep+1, m.name, rate, achieved, a.Round(10*time.Microsecond), b.Round(10*time.Microsecond))
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	medD := func(v []time.Duration) time.Duration { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	fmt.Printf("medians of %d reps: drain polling %.0f msg/s, cdc %.0f msg/s (cdc/polling %.2f), the stream alone %.0f msg/s (stream/polling %.2f); latency p50 polling %s cdc %s, p99 polling %s cdc %s\n",
		reps, med(drain["polling"]), med(drain["cdc"]), med(drain["cdc"])/med(drain["polling"]), med(drain["stream"]), med(drain["stream"])/med(drain["polling"]),
		medD(p50["polling"]).Round(10*time.Microsecond), medD(p50["cdc"]).Round(10*time.Microsecond),
		medD(p99["polling"]).Round(10*time.Microsecond), medD(p99["cdc"]).Round(10*time.Microsecond))
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// walsenderCPU is the CPU time (user and system) of the cluster's
// walsenders now, or "n/a" when there is none; the cluster runs on this
// machine.
func walsenderCPU(t *testing.T, pool *pgxpool.Pool) string {
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_replication`)
	testenv.Must(t, err, "walsenders")
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	testenv.Must(t, err, "walsenders")
	if len(pids) == 0 {
		return "n/a"
	}
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return "n/a"
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
		s, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
		ticks += u + s
	}
	return (time.Duration(ticks) * 10 * time.Millisecond).String() // USER_HZ 100
}

// rawStream reads the relay's slot until it has received n inserts,
// decoding and publishing nothing, and returns the time it took (the
// replication connection's start included) and the walsender's CPU.
func rawStream(t *testing.T, pool *pgxpool.Pool, n int) (time.Duration, string) {
	ctx := context.Background()
	began := time.Now()
	rc := pool.Config().ConnConfig.Config.Copy()
	rc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, rc)
	testenv.Must(t, err, "replication connection")
	defer conn.Close(ctx)
	// The relay's options on PostgreSQL 14 and later, its default slot and publication.
	args := []string{"proto_version '1'", "publication_names 'txbox_outbox_cdc'", "binary 'true'"}
	testenv.Must(t, pglogrepl.StartReplication(ctx, conn, "txbox_outbox_cdc", 0, pglogrepl.StartReplicationOptions{PluginArgs: args}), "start replication")
	for got := 0; got < n; {
		raw, err := conn.ReceiveMessage(ctx)
		testenv.Must(t, err, "receive")
		if d, ok := raw.(*pgproto3.CopyData); ok && len(d.Data) > 25 && d.Data[0] == pglogrepl.XLogDataByteID && d.Data[25] == 'I' {
			got++
		}
	}
	el := time.Since(began)
	return el, walsenderCPU(t, pool)
}
