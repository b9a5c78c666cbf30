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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/roundtimes"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// counter counts acks and keeps each message's commit-to-ack time (from
// created_at, the database's clock): of its inner publisher (JetStream),
// or of none, a no-op publisher.
type counter struct {
	inner txbox.Publisher
	mu    sync.Mutex
	n     int
	lat   []time.Duration
	done  chan struct{}
	until int
	// created and arrived, when created is not nil: each message's
	// created_at and ack, by id (the stages' breakdown).
	created, arrived map[string]time.Time
}

func (c *counter) Publish(ctx context.Context, msgs []txbox.Message) []error {
	var errs []error
	if c.inner != nil {
		errs = c.inner.Publish(ctx, msgs)
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range msgs {
		if errs != nil && errs[i] != nil {
			continue
		}
		c.lat = append(c.lat, now.Sub(m.CreatedAt))
		c.n++
		if c.created != nil {
			c.created[m.ID], c.arrived[m.ID] = m.CreatedAt, now
		}
	}
	if c.done != nil && c.n >= c.until {
		close(c.done)
		c.done = nil
	}
	return errs
}

func (c *counter) reset(until int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n, c.lat, c.until = 0, nil, until
	c.done = make(chan struct{})
	return c.done
}

// benchPrefix is message mode's prefix in the comparison.
const benchPrefix = "txbox-bench"

// mode is one relay under comparison, and the outbox its writers add to.
type mode struct {
	name   string
	prefix string // txbox.Config.MessagePrefix: message mode
	// start starts the relay; a log-based relay records its batches in
	// rec when rec is not nil.
	start func(t *testing.T, pool *pgxpool.Pool, pub txbox.Publisher, rec *batches) (stop func())
}

func cdcMode(name, prefix string) mode {
	return mode{name, prefix, func(t *testing.T, pool *pgxpool.Pool, pub txbox.Publisher, rec *batches) func() {
		cfg := cdc.Config{BatchSize: 500, MessagePrefix: prefix}
		if rec != nil {
			cfg.Observer = rec
		}
		r, err := cdc.New(pool, pub, cfg)
		testenv.Must(t, err, "cdc.New")
		testenv.Must(t, r.Start(context.Background()), "start")
		return func() { _ = r.Stop(context.Background()) }
	}}
}

var modes = []mode{
	{"polling", "", func(t *testing.T, pool *pgxpool.Pool, pub txbox.Publisher, _ *batches) func() {
		r, err := relay.New(txboxpgx.New(pool), pub, relay.Config{BatchSize: 500})
		testenv.Must(t, err, "relay.New")
		testenv.Must(t, r.Start(context.Background()), "start")
		return func() { _ = r.Stop(context.Background()) }
	}},
	cdcMode("cdc", ""),
	cdcMode("cdc-msg", benchPrefix),
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
	// The polling relay, idle before its stop, may have armed the table's
	// doorbell: disarmed, the writers notify nobody (as with no polling
	// relay), whichever relay ran before.
	_, err := pool.Exec(ctx, `TRUNCATE txbox_outbox; UPDATE txbox_outbox_wake SET armed = false; CHECKPOINT`)
	testenv.Must(t, err, "truncate")
	_, err = cdc.CreateSlot(ctx, pool, cdc.Config{})
	testenv.Must(t, err, "create slot")
}

// The log-based relay, in table mode (cdc) and in message mode (cdc-msg),
// beside the polling relay on one private server, runs interleaved
// (polling, cdc, cdc-msg, polling …): the drain of a backlog into a no-op
// publisher and into JetStream (the shared NATS server, a stream of the
// test's own), with the PostgreSQL server's CPU per event during the no-op
// drain, and commit-to-ack latency into JetStream at an offered rate,
// broken down by stage for the log-based relay, with the server's WAL
// flushes meanwhile; beside them, the raw JetStream async publish of as
// many messages (the ceiling of a drain into JetStream) and the stream
// alone (the ceiling of table mode's drain). It prints figures and
// asserts none; it runs only with TXBOX_CDC_BENCH=1:
//
//	TXBOX_CDC_BENCH=1 go test -count=1 -run TestCompareWithPollingRelay -v ./cdc/
//
// TXBOX_CDC_BENCH_ROWS (default 50000), TXBOX_CDC_BENCH_REPS (default 3),
// TXBOX_CDC_BENCH_RATE (events/s, default 1000) and
// TXBOX_CDC_BENCH_SECONDS (default 5) change the sizes;
// TXBOX_CDC_BENCH_SETTINGS adds server settings to the cluster's
// ("fsync=off": the latency without the disk's flush);
// TXBOX_CDC_BENCH_DIR puts the cluster (its data directory, pg_wal
// included) in a directory of that file system instead of the system's
// temporary one: /dev/shm, a tmpfs, stands for a disk whose flush is
// nearly free (an NVMe or a controller with a power-loss-protected
// cache), with fsync and synchronous_commit on; the test prints the file
// system it ran on. TXBOX_CDC_BENCH_DRAIN=0 runs the latency runs only.
func TestCompareWithPollingRelay(t *testing.T) {
	benchOnly(t)
	rows, reps := benchSize("TXBOX_CDC_BENCH_ROWS", 50000), benchSize("TXBOX_CDC_BENCH_REPS", 3)
	rate, seconds := benchSize("TXBOX_CDC_BENCH_RATE", 1000), benchSize("TXBOX_CDC_BENCH_SECONDS", 5)
	drains := os.Getenv("TXBOX_CDC_BENCH_DRAIN") != "0"
	// WAL I/O timing on: the latency runs print the mean WAL flush.
	settings := []string{"track_wal_io_timing=on"}
	if v := os.Getenv("TXBOX_CDC_BENCH_SETTINGS"); v != "" {
		settings = append(settings, strings.Fields(v)...)
	}
	if dir := os.Getenv("TXBOX_CDC_BENCH_DIR"); dir != "" {
		t.Setenv("TMPDIR", dir) // testenv.PrivatePostgres makes the cluster's directory there
	}
	where := os.TempDir()
	t.Logf("the cluster's directory is under %s, on %s; load average %s", where, fsType(where), loadAverage())
	t.Cleanup(func() { t.Logf("load average at the end %s", loadAverage()) })
	_, pool := logicalCluster(t, settings...)
	ctx := context.Background()
	obs := map[string]*txbox.Outbox[pgx.Tx]{}
	for _, prefix := range []string{"", benchPrefix} {
		ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{MessagePrefix: prefix})
		testenv.Must(t, err, "txbox.New")
		obs[prefix] = ob
	}
	payload := []byte(`{"order_id":123456,"customer":"c-42","items":[{"sku":"tea","qty":2}],"total_cents":1999}`)

	// JetStream: a stream of the test's own on the shared server, purged
	// before each run.
	nc := testenv.NATS(t)
	subject := testenv.Name("cdcbench") + "."
	stream, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: strings.ToUpper(strings.TrimSuffix(subject, ".")), Subjects: []string{subject + ">"}})
	testenv.Must(t, err, "stream")
	t.Cleanup(func() {
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(context.Background(), stream.CachedInfo().Config.Name)
		}
	})
	js, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: subject})
	testenv.Must(t, err, "publisher")
	purge := func() { testenv.Must(t, stream.Purge(ctx), "purge") }

	fill := func(ob *txbox.Outbox[pgx.Tx]) {
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
	perEvent := map[string][]float64{} // the server's CPU per event in µs, no-op drain
	for rep := range reps {
		for _, m := range modes {
			ob := obs[m.prefix]
			into := []string{"noop", "nats"}
			if !drains {
				into = nil
			}
			// Drain: rows queued first, then the relay started; into the
			// no-op publisher, then into JetStream.
			for _, into := range into {
				fresh(t, pool)
				c := &counter{}
				if into == "nats" {
					purge()
					c.inner = js
				}
				fill(ob)
				done := c.reset(rows)
				cpu, server := processCPU(), serverCPU(t, pool)
				began := time.Now()
				stop := m.start(t, pool, c, nil)
				<-done
				el := time.Since(began)
				cpu = processCPU() - cpu
				used := serverCPU(t, pool).since(server)
				stop()
				key := m.name + " " + into
				drain[key] = append(drain[key], float64(rows)/el.Seconds())
				us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(rows) }
				if into == "noop" {
					perEvent[m.name] = append(perEvent[m.name], us(used.total()))
				}
				t.Logf("rep %d %-7s drain into %s %d rows in %s: %.0f msg/s (CPU: this process %s; PostgreSQL %.1f µs/event: backends %.1f, walsender %.1f, background %.1f)",
					rep+1, m.name, into, rows, el.Round(time.Millisecond), float64(rows)/el.Seconds(), cpu.Round(10*time.Millisecond),
					us(used.total()), us(used.backends), us(used.walsender), us(used.background))
			}
			if m.name == "polling" && drains {
				// The ceiling into JetStream: the same number of messages,
				// alike, published asynchronously by one connection as fast
				// as JetStream acknowledges them, no relay nor database.
				purge()
				el := rawJetStream(t, nc, js, rows, payload)
				drain["raw nats"] = append(drain["raw nats"], float64(rows)/el.Seconds())
				t.Logf("rep %d raw     JetStream async publish of %d messages in %s: %.0f msg/s", rep+1, rows, el.Round(time.Millisecond), float64(rows)/el.Seconds())
			}
			if m.name == "cdc" && drains {
				// The stream alone: the slot read to its end, nothing decoded
				// nor published; what the walsender delivers bounds the relay.
				fresh(t, pool)
				fill(ob)
				el, ws := rawStream(t, pool, rows)
				drain["stream"] = append(drain["stream"], float64(rows)/el.Seconds())
				t.Logf("rep %d stream  %d inserts in %s: %.0f msg/s (CPU: walsender %s)", rep+1, rows, el.Round(time.Millisecond), float64(rows)/el.Seconds(), ws)
			}

			// Latency into JetStream: one message per transaction at the
			// offered rate.
			fresh(t, pool)
			purge()
			c := &counter{inner: js}
			total := rate * seconds / 8 * 8
			done := c.reset(total)
			var rec *batches
			if m.name != "polling" {
				rec = &batches{}
				c.created, c.arrived = map[string]time.Time{}, map[string]time.Time{}
			}
			stop := m.start(t, pool, c, rec)
			time.Sleep(200 * time.Millisecond) // the relay's start
			server := serverCPU(t, pool)
			syncs := walSyncs(t, pool)
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
			used := serverCPU(t, pool).since(server)
			stop()
			c.mu.Lock()
			lat := slices.Clone(c.lat)
			c.mu.Unlock()
			slices.Sort(lat)
			a, b := lat[len(lat)/2], lat[len(lat)*99/100]
			p50[m.name], p99[m.name] = append(p50[m.name], a), append(p99[m.name], b)
			t.Logf("rep %d %-7s latency into nats at %d/s offered (%.0f/s written): p50 %s p99 %s (PostgreSQL CPU, the writers' included: %.1f µs/event)",
				rep+1, m.name, rate, achieved, a.Round(10*time.Microsecond), b.Round(10*time.Microsecond), float64(used.total().Microseconds())/float64(total))
			flushes := walSyncs(t, pool).since(syncs)
			t.Logf("rep %d %-7s WAL flushes meanwhile: %s", rep+1, m.name, flushes)
			if rec != nil {
				c.mu.Lock()
				t.Logf("rep %d %-7s latency by stage:\n%s", rep+1, m.name, rec.breakdown(c.created, c.arrived))
				c.mu.Unlock()
			}
		}
	}
	medD := func(v []time.Duration) time.Duration {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2].Round(10 * time.Microsecond)
	}
	if !drains {
		fmt.Printf("medians of %d reps (ranges), latency into nats at %d/s offered, the cluster on %s:\n", reps, rate, fsType(where))
		for _, m := range modes {
			fmt.Printf("  %-7s p50 %s (%s–%s) p99 %s (%s–%s)\n", m.name,
				medD(p50[m.name]), slices.Min(p50[m.name]).Round(10*time.Microsecond), slices.Max(p50[m.name]).Round(10*time.Microsecond),
				medD(p99[m.name]), slices.Min(p99[m.name]).Round(10*time.Microsecond), slices.Max(p99[m.name]).Round(10*time.Microsecond))
		}
		return
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	rng := func(v []float64) string { return fmt.Sprintf("%.0f–%.0f", slices.Min(v), slices.Max(v)) }
	fmt.Printf("medians of %d reps (ranges):\n", reps)
	for _, m := range modes {
		n, j := drain[m.name+" noop"], drain[m.name+" nats"]
		pol, polJ := med(drain["polling noop"]), med(drain["polling nats"])
		fmt.Printf("  %-7s drain noop %.0f msg/s (%s, %.2f of polling), into nats %.0f msg/s (%s, %.2f of polling); PostgreSQL CPU %.1f µs/event (%.1f–%.1f, %.2f of polling); latency into nats p50 %s (%s–%s) p99 %s (%s–%s)\n",
			m.name, med(n), rng(n), med(n)/pol, med(j), rng(j), med(j)/polJ,
			med(perEvent[m.name]), slices.Min(perEvent[m.name]), slices.Max(perEvent[m.name]), med(perEvent[m.name])/med(perEvent["polling"]),
			medD(p50[m.name]), slices.Min(p50[m.name]).Round(10*time.Microsecond), slices.Max(p50[m.name]).Round(10*time.Microsecond),
			medD(p99[m.name]), slices.Min(p99[m.name]).Round(10*time.Microsecond), slices.Max(p99[m.name]).Round(10*time.Microsecond))
	}
	fmt.Printf("  the stream alone %.0f msg/s (%s, %.2f of polling's noop drain)\n", med(drain["stream"]), rng(drain["stream"]), med(drain["stream"])/med(drain["polling noop"]))
	raw := drain["raw nats"]
	fmt.Printf("  raw JetStream async publish %.0f msg/s (%s, %.2f of polling's drain into nats); drain into nats of the ceiling:", med(raw), rng(raw), med(raw)/med(drain["polling nats"]))
	for _, m := range modes {
		fmt.Printf(" %s %.2f", m.name, med(drain[m.name+" nats"])/med(raw))
	}
	fmt.Println()
}

// fsType names the file system dir is on: tmpfs, or the magic number of
// another.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "?"
	}
	if st.Type == 0x01021994 { // TMPFS_MAGIC
		return "tmpfs (memory: a model of a disk whose flush is nearly free)"
	}
	return fmt.Sprintf("a disk (file system magic %#x)", st.Type)
}

// loadAverage is the machine's 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuTimes is the CPU time (user and system) of a PostgreSQL server's
// processes by kind, and by pid to subtract an earlier reading.
type cpuTimes struct {
	backends, walsender, background time.Duration
	pids                            map[int]pidCPU
}

type pidCPU struct {
	kind string
	cpu  time.Duration
}

func (c cpuTimes) total() time.Duration { return c.backends + c.walsender + c.background }

// since is the CPU the processes spent after earlier: a process that
// started since counts in full; one that exited since, not at all.
func (c cpuTimes) since(earlier cpuTimes) cpuTimes {
	var out cpuTimes
	for pid, p := range c.pids {
		d := p.cpu - earlier.pids[pid].cpu
		switch p.kind {
		case "walsender":
			out.walsender += d
		case "backend":
			out.backends += d
		default:
			out.background += d
		}
	}
	return out
}

// serverCPU reads the CPU of every process of the pool's server (the
// postmaster's children, from /proc: the cluster runs on this machine):
// client backends, walsenders, and the rest (checkpointer, WAL writer,
// autovacuum …).
func serverCPU(t *testing.T, pool *pgxpool.Pool) cpuTimes {
	var backend int
	testenv.Must(t, pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend), "backend pid")
	f, ok := procStat(backend)
	if !ok {
		t.Fatalf("no /proc/%d/stat: the server must run on this machine", backend)
	}
	postmaster, _ := strconv.Atoi(f[1]) // ppid, field 4
	out := cpuTimes{pids: map[int]pidCPU{}}
	entries, err := os.ReadDir("/proc")
	testenv.Must(t, err, "/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, ok := procStat(pid)
		if !ok || f[1] != strconv.Itoa(postmaster) {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)           // utime, field 14
		s, _ := strconv.ParseInt(f[12], 10, 64)           // stime, field 15
		cpu := time.Duration(u+s) * 10 * time.Millisecond // USER_HZ 100
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		kind := "backend" // "postgres: user db host state"
		title := strings.TrimPrefix(string(bytes.TrimRight(cmd, "\x00")), "postgres: ")
		switch {
		case strings.HasPrefix(title, "walsender"):
			kind = "walsender"
		case slices.ContainsFunc([]string{"checkpointer", "background writer", "walwriter", "autovacuum", "logical replication", "stats", "archiver"},
			func(p string) bool { return strings.HasPrefix(title, p) }):
			kind = "background"
		}
		out.pids[pid] = pidCPU{kind, cpu}
	}
	return out
}

// procStat returns the fields of /proc/pid/stat after the command name:
// f[0] is the state (field 3).
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])), true
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

// walSync is pg_stat_wal's count of WAL flushes to disk (wal_sync) and
// their time (wal_sync_time, with track_wal_io_timing on).
type walSync struct {
	n  int64
	ms float64
}

func walSyncs(t *testing.T, pool *pgxpool.Pool) walSync {
	var w walSync
	testenv.Must(t, pool.QueryRow(context.Background(), `SELECT wal_sync, wal_sync_time FROM pg_stat_wal`).Scan(&w.n, &w.ms), "pg_stat_wal")
	return w
}

func (w walSync) since(earlier walSync) walSync { return walSync{w.n - earlier.n, w.ms - earlier.ms} }

func (w walSync) String() string {
	if w.n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d, each %.0f µs on average (pg_stat_wal)", w.n, w.ms*1000/float64(w.n))
}

// rawJetStream publishes n messages like the relays' (the payload, a
// topic, a message id each; natsjs.Publisher's headers) asynchronously
// on nc, as fast as JetStream takes them (at most 4000 unacknowledged,
// natsjs's default; a publish waits for room), and returns the time until
// the last ack.
func rawJetStream(t *testing.T, nc *nats.Conn, pub *natsjs.Publisher, n int, payload []byte) time.Duration {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4000))
	testenv.Must(t, err, "jetstream")
	msgs := make([]*nats.Msg, n)
	run := testenv.Name("raw")
	for i := range msgs {
		msgs[i] = pub.Msg(txbox.Message{ID: run + "-" + strconv.Itoa(i), Topic: "bench.orders", Payload: payload, CreatedAt: time.Now()})
	}
	began := time.Now()
	for _, m := range msgs {
		_, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute))
		testenv.Must(t, err, "publish")
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("JetStream acknowledged nothing new for a minute")
	}
	return time.Since(began)
}

// batches records a log-based relay's batches (its Observer, a
// roundtimes.BatchRecorder) to break commit→ack down by stage.
type batches struct {
	mu  sync.Mutex
	all []roundtimes.Batch
}

func (b *batches) RelayBatch(x roundtimes.Batch) {
	b.mu.Lock()
	b.all = append(b.all, x)
	b.mu.Unlock()
}

func (*batches) Claimed(int, time.Duration)                   {}
func (*batches) Published(int, int, time.Duration)            {}
func (*batches) Settled(string, txbox.Outcome, time.Duration) {}
func (*batches) RoundFailed(string)                           {}
func (*batches) Sampled(txbox.RelaySample)                    {}

// breakdown is the mean and the median of each stage of commit→ack over
// the messages recorded (created and arrived: each message's created_at
// and the counter's ack, by id), and the mean over the slowest 1%:
// created_at to the transaction's commit (the writer's statement and
// commit; zero in message mode, whose events take the commit time),
// commit to the walsender's send of it (the WAL flush, the walsender's
// wake-up and decoding), the send to the relay having read it, the read
// to the publish (the hand-over, a wave waiting for room), and the
// publish to the ack.
func (b *batches) breakdown(created, arrived map[string]time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	names := []string{"created_at→commit", "commit→walsender sent", "sent→relay read", "read→publish", "publish→ack"}
	type msg struct {
		total  time.Duration
		stages [5]time.Duration
	}
	var ms []msg
	sizes, beside := 0, 0
	for _, x := range b.all {
		sizes += len(x.IDs)
		beside += x.Beside
		for i, id := range x.IDs {
			c, ok1 := created[id]
			a, ok2 := arrived[id]
			if !ok1 || !ok2 {
				continue
			}
			ms = append(ms, msg{a.Sub(c), [5]time.Duration{x.Commit[i].Sub(c), x.Sent[i].Sub(x.Commit[i]),
				x.Received[i].Sub(x.Sent[i]), x.Publish.Sub(x.Received[i]), x.Acked.Sub(x.Publish)}})
		}
	}
	if len(ms) == 0 {
		return "  (no batch recorded)"
	}
	slices.SortFunc(ms, func(a, b msg) int { return int(a.total - b.total) })
	slow := ms[len(ms)*99/100:]
	us := func(d time.Duration) string { return fmt.Sprintf("%8.0f µs", float64(d.Nanoseconds())/1e3) }
	var w strings.Builder
	fmt.Fprintf(&w, "  %-24s %11s %11s %11s\n", "stage", "mean", "median", "slowest 1%")
	for k, name := range append(names, "total") {
		var sum, slowSum time.Duration
		vals := make([]time.Duration, len(ms))
		for i, m := range ms {
			v := m.total
			if k < len(names) {
				v = m.stages[k]
			}
			vals[i] = v
			sum += v
			if i >= len(ms)-len(slow) {
				slowSum += v
			}
		}
		slices.Sort(vals)
		fmt.Fprintf(&w, "  %-24s %s %s %s\n", name, us(sum/time.Duration(len(ms))), us(vals[len(vals)/2]), us(slowSum/time.Duration(len(slow))))
	}
	fmt.Fprintf(&w, "  %d messages in %d publishes (%.1f a publish), %.2f other publishes in flight at each start",
		len(ms), len(b.all), float64(sizes)/float64(len(b.all)), float64(beside)/float64(len(b.all)))
	return w.String()
}
