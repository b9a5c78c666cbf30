// Package crash_test is txbox's crash-test harness: real processes (the
// built txbox binary as the relay, a producer, a consumer, a private NATS
// server) killed with SIGKILL at random moments and restarted, PostgreSQL
// connections cut, frozen and dropped on the client side only through a
// proxy, and at the end a ledger built from the database and a full read of
// the stream: lost, phantom, double effects, per-key order violations, rows
// stuck pending, and the recovery time after each fault. docs/reference/guarantees.md
// ("Crash tests") has the commands and a long run's figures.
//
// Settings (environment): TXBOX_CRASH_DURATION (per scenario, default
// 40s), TXBOX_CRASH_MIN_KILLS (per scenario, default 30: the run goes on
// past the duration until that many SIGKILLs), TXBOX_CRASH_SEED (default:
// from the clock; printed), TXBOX_CRASH_SCENARIOS (default
// "postgres,sqlite,ordered,cdc"; ordered runs for three quarters of the
// duration and two thirds of the kills, cdc for half the duration and two
// thirds of the kills, in table mode or message mode as the seed is even
// or odd; cdc-table and cdc-message name one mode), TXBOX_CRASH_DRAIN (how long the end's
// delivery of the backlog may make no progress, default 2m), TXBOX_CRASH_REPORT (a file the ledger
// is appended to), TXBOX_CRASH_FAULTS (the fault kinds to draw from, a
// comma-separated subset of relay, producer, consumer, nats, pg; default
// all of the scenario's), TXBOX_CRASH_BATCH (the consumer's batch size; 1:
// unbatched; default the consumer's default), TXBOX_CRASH_CONCURRENCY (the
// consumer's, default 4), TXBOX_CRASH_ACKWAIT (the
// durable's AckWait, default 2s), TXBOX_CRASH_KEEP (keep the logs and data of a run that
// passed; a failed run's are always kept, and the end of each log printed).
package crash_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/crash/internal/crashdb"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// settings of a run, from the environment.
type settings struct {
	duration  time.Duration
	minKills  int
	seed      uint64
	scenarios []string
	drain     time.Duration
	report    string
	faults    []string // TXBOX_CRASH_FAULTS
	batch     string   // TXBOX_CRASH_BATCH
	workers   string   // TXBOX_CRASH_CONCURRENCY
	ackWait   time.Duration
}

func loadSettings(t *testing.T) settings {
	s := settings{duration: 40 * time.Second, minKills: 30, seed: uint64(time.Now().UnixNano()),
		scenarios: []string{"postgres", "sqlite", "ordered", "cdc"}, drain: 2 * time.Minute, report: os.Getenv("TXBOX_CRASH_REPORT")}
	dur := func(name string, into *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("%s=%q: %v", name, v, err)
			}
			*into = d
		}
	}
	dur("TXBOX_CRASH_DURATION", &s.duration)
	s.drain = 2 * time.Minute // the drain fails once nothing was delivered for this long
	dur("TXBOX_CRASH_DRAIN", &s.drain)
	s.ackWait = 2 * time.Second
	dur("TXBOX_CRASH_ACKWAIT", &s.ackWait)
	if v := os.Getenv("TXBOX_CRASH_MIN_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("TXBOX_CRASH_MIN_KILLS=%q: %v", v, err)
		}
		s.minKills = n
	}
	if v := os.Getenv("TXBOX_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TXBOX_CRASH_SEED=%q: %v", v, err)
		}
		s.seed = n
	}
	if v := os.Getenv("TXBOX_CRASH_BATCH"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("TXBOX_CRASH_BATCH=%q: want a batch size, 1 or more", v)
		}
		s.batch = v
	}
	if v := os.Getenv("TXBOX_CRASH_CONCURRENCY"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("TXBOX_CRASH_CONCURRENCY=%q: want a number of workers, 1 or more", v)
		}
		s.workers = v
	}
	if v := os.Getenv("TXBOX_CRASH_FAULTS"); v != "" {
		s.faults = strings.Split(v, ",")
	}
	if v := os.Getenv("TXBOX_CRASH_SCENARIOS"); v != "" {
		s.scenarios = strings.Split(v, ",")
	}
	return s
}

// TestCrash runs each scenario (PostgreSQL through a fault proxy, SQLite on
// a file, and "ordered": PostgreSQL with an Ordered consumer whose handler
// applies whatever arrives, its process killed again and again, so that
// the ledger's order check is the consumer runtime's; "cdc": the log-based
// relay, txbox relay --cdc, on a private cluster with wal_level=logical,
// killed mid-stream above all, in table mode or, its producer writing with
// txbox.Config.MessagePrefix, in message mode) side by side and fails unless the ledger holds no lost, phantom,
// doubly applied or out-of-order message and no row stuck pending.
func TestCrash(t *testing.T) {
	st := loadSettings(t)
	t.Logf("crash: seed %d (replay the fault schedule with TXBOX_CRASH_SEED=%d), %s per scenario, at least %d kills each",
		st.seed, st.seed, st.duration, st.minKills)
	total := &tally{start: time.Now()}
	t.Cleanup(func() { total.report(t, st.report) }) // after every scenario
	bin := build(t)
	total.built = time.Since(total.start)
	for _, name := range st.scenarios {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			switch name {
			case "postgres", "sqlite":
			case "ordered", "cdc", "cdc-table", "cdc-message":
				st := st // this scenario's settings only
				st.duration, st.minKills = st.duration*3/4, st.minKills*2/3
				if strings.HasPrefix(name, "cdc") {
					st.duration = st.duration * 2 / 3
				}
				total.add(run(t, bin, st, name))
				return
			default:
				t.Fatalf("unknown scenario %q (want postgres, sqlite, ordered, cdc, cdc-table or cdc-message)", name)
			}
			total.add(run(t, bin, st, name))
		})
	}
}

// build compiles the txbox binary and the harness's programs into a
// temporary directory, in workspace mode from the repository's root.
func build(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir := t.TempDir()
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/txbox/txbox/cmd/txbox",
		"github.com/txbox/txbox/tests/crash/producer",
		"github.com/txbox/txbox/tests/crash/consumer",
		"github.com/txbox/txbox/tests/crash/natsd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("crash: built txbox, producer, consumer, natsd in %s", time.Since(start).Round(time.Millisecond))
	return dir
}

// fault kinds.
const (
	killRelay    = "relay kill"
	killProducer = "producer kill"
	killConsumer = "consumer kill"
	killNATS     = "nats kill"
	pgCut        = "pg cut"
	pgFreeze     = "pg freeze"
	pgDropClient = "pg client-side drop"
)

// fault is one fault injected, and how long the system took to deliver
// again after it ended.
type fault struct {
	kind     string
	at       time.Duration // since the start of the faults
	lasted   time.Duration
	recovery time.Duration
	stalled  bool // no delivery within recoveryCap
}

const recoveryCap = time.Minute

// env is a running scenario.
type env struct {
	t       *testing.T
	name    string
	cdc     string // the log-based relay's mode, "table" or "message"; "" = the polling relay
	dir     string
	dialect txboxdriver.Dialect
	ledger  *sql.DB // direct connection, never faulted
	proxy   *faultProxy
	natsURL string
	procs   map[string]*proc
}

// run runs the scenario name and returns its number of SIGKILLs.
func run(t *testing.T, bin string, st settings, name string) int {
	seed := st.seed + uint64(len(name)) // one schedule per scenario
	rng := rand.New(rand.NewPCG(seed, 17))
	dir, err := os.MkdirTemp("", "txbox-crash-"+name+"-")
	testenv.Must(t, err, "work dir")
	e := &env{t: t, name: name, dir: dir, procs: map[string]*proc{}}
	switch name {
	case "cdc": // one mode or the other from run to run, both in time
		e.cdc = []string{"table", "message"}[st.seed%2]
	case "cdc-table", "cdc-message":
		e.cdc = strings.TrimPrefix(name, "cdc-")
	}
	if e.cdc != "" {
		t.Logf("crash %s: the log-based relay in %s mode", name, e.cdc)
	}
	t.Cleanup(func() {
		for _, p := range e.procs {
			p.Stop()
		}
		if e.proxy != nil {
			e.proxy.Close()
		}
		if t.Failed() || os.Getenv("TXBOX_CRASH_KEEP") != "" {
			if t.Failed() {
				e.dumpLogs()
			}
			t.Logf("crash %s: logs and data kept in %s; replay with TXBOX_CRASH_SEED=%d", name, dir, st.seed)
			return
		}
		_ = os.RemoveAll(dir)
	})
	ctx := context.Background()

	// The database: a schema of its own behind a fault proxy, or a file.
	var procDB, relayDB, directDB string
	var relayArgs []string
	serverURL := testenv.PostgresURL()
	if e.cdc != "" {
		// The log-based relay needs wal_level=logical: a cluster of the
		// scenario's own.
		serverURL = testenv.PrivatePostgres(t, "wal_level=logical", "max_replication_slots=4", "max_wal_senders=4").URL
	}
	if name != "sqlite" {
		e.dialect = txboxdriver.Postgres
		schema := testenv.Name("crash")
		admin, err := sql.Open("pgx", serverURL)
		testenv.Must(t, err, "open")
		if err := admin.PingContext(ctx); err != nil {
			testenv.Unavailable(t, "PostgreSQL", err)
		}
		_, err = admin.ExecContext(ctx, "CREATE SCHEMA "+schema)
		testenv.Must(t, err, "create schema")
		t.Cleanup(func() {
			if !t.Failed() && os.Getenv("TXBOX_CRASH_KEEP") == "" {
				_, _ = admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			}
			_ = admin.Close()
		})
		u, err := url.Parse(serverURL)
		testenv.Must(t, err, "postgres url")
		host := u.Host
		if e.cdc == "" {
			e.proxy, err = newFaultProxy(u.Host, 10*time.Second)
			testenv.Must(t, err, "proxy")
			host = e.proxy.Addr()
		}
		with := func(host string, params map[string]string) string {
			v := *u
			v.Host = host
			q := v.Query()
			for k, p := range params {
				q.Set(k, p)
			}
			v.RawQuery = q.Encode()
			return v.String()
		}
		directDB = with(u.Host, map[string]string{"search_path": schema})
		// The programs set what a careful service sets behind an unreliable
		// network: a connect timeout and an idle-in-transaction timeout, so
		// that a session whose client vanished gives up its locks.
		procDB = with(host, map[string]string{"search_path": schema, "connect_timeout": "2", "idle_in_transaction_session_timeout": "10000"})
		relayDB = with(host, map[string]string{"connect_timeout": "2", "pool_max_conns": "4"})
		relayArgs = []string{"--schema", schema}
		t.Logf("crash %s: schema %s, database %s", name, schema, host)
	} else {
		e.dialect = txboxdriver.SQLite
		path := filepath.Join(dir, "crash.db")
		procDB, relayDB, directDB = "sqlite://"+path, "sqlite://"+path, "sqlite://"+path
	}
	migrateArgs := append([]string{"migrate", "up", "--db", directDB, "--inbox-table", "txbox_inbox"}, relayArgs...)
	if name != "sqlite" {
		migrateArgs = append([]string{"migrate", "up", "--db", serverURL, "--inbox-table", "txbox_inbox"}, relayArgs...)
	}
	if out, err := exec.Command(filepath.Join(bin, "txbox"), migrateArgs...).CombinedOutput(); err != nil {
		t.Fatalf("txbox migrate up: %v\n%s", err, out)
	}
	// Message mode: Add writes to the WAL, the table holds dead letters only.
	const messagePrefix = "txbox-crash"
	if e.cdc != "" {
		slotArgs := append([]string{"slot", "create", "--db", serverURL}, relayArgs...)
		if out, err := exec.Command(filepath.Join(bin, "txbox"), slotArgs...).CombinedOutput(); err != nil {
			t.Fatalf("txbox slot create: %v\n%s", err, out)
		}
	}
	e.ledger, _, err = crashdb.Open(directDB)
	testenv.Must(t, err, "open ledger db")
	t.Cleanup(func() { _ = e.ledger.Close() })
	testenv.Must(t, crashdb.CreateTables(ctx, e.ledger, e.dialect), "create tables")

	// The private NATS server, its streams and the durable consumer.
	port := freePort(t)
	e.natsURL = "nats://127.0.0.1:" + strconv.Itoa(port)
	e.add("natsd", filepath.Join(bin, "natsd"), "-dir", filepath.Join(dir, "nats"), "-port", strconv.Itoa(port))
	testenv.Must(t, e.procs["natsd"].Start(), "natsd")
	nc, err := nats.Connect(e.natsURL, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	testenv.Must(t, err, "connect to natsd")
	t.Cleanup(nc.Close)
	testenv.Await(t, "natsd up", func() (bool, string) { return nc.IsConnected(), nc.Status().String() })
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	stream, err := natsjs.EnsureStream(sctx, nc, natsjs.StreamConfig{Name: "CRASH", Subjects: []string{"crash.>"}})
	testenv.Must(t, err, "stream")
	dlq, err := natsjs.EnsureStream(sctx, nc, natsjs.StreamConfig{Name: "CRASH_DLQ", Subjects: []string{"crashdlq.>"}})
	testenv.Must(t, err, "dlq stream")
	_, err = natsjs.EnsureConsumer(sctx, nc, "CRASH", natsjs.ConsumerConfig{Durable: "apply", FilterSubjects: []string{"crash.orders"}, AckWait: st.ackWait})
	testenv.Must(t, err, "durable consumer")
	cancel()

	// The relay (the txbox binary), the consumer and the producer.
	relayArgs = append([]string{filepath.Join(bin, "txbox"), "relay", "--db", relayDB, "--broker", e.natsURL,
		"--stream", "CRASH", "--subject-prefix", "crash.", "--publish-timeout", "2s", "--stats-interval", "2s", "--log-level", "warn"}, relayArgs...)
	if e.cdc != "" {
		relayArgs = append(relayArgs, "--cdc")
		if e.cdc == "message" {
			relayArgs = append(relayArgs, "--message-prefix", messagePrefix)
		}
	} else {
		relayArgs = append(relayArgs, "--poll-interval", "100ms")
	}
	e.add("relay", relayArgs...)
	consumerArgs := []string{filepath.Join(bin, "consumer"), "-db", procDB, "-nats", e.natsURL, "-binding", "CRASH/apply", "-dlq", "crashdlq."}
	if name == "ordered" {
		consumerArgs = append(consumerArgs, "-ordered")
	}
	if st.batch != "" {
		consumerArgs = append(consumerArgs, "-batch", st.batch)
	}
	if st.workers != "" {
		consumerArgs = append(consumerArgs, "-concurrency", st.workers)
	}
	e.add("consumer", consumerArgs...)
	producerArgs := []string{filepath.Join(bin, "producer"), "-db", procDB, "-keys", "16", "-interval", "8ms"}
	if e.cdc == "message" {
		producerArgs = append(producerArgs, "-message-prefix", messagePrefix)
	}
	e.add("producer", producerArgs...)
	for _, n := range []string{"relay", "consumer", "producer"} {
		testenv.Must(t, e.procs[n].Start(), "start %s", n)
	}
	testenv.Await(t, "a first effect", func() (bool, string) {
		return e.count("SELECT count(*) FROM crash_effects") > 0, fmt.Sprintf("%d rows pending", e.count(e.pendingQuery()))
	})

	// Faults, one at a time, each followed by a wait for the next delivery.
	kinds := []string{killRelay, killRelay, killRelay, killProducer, killProducer, killConsumer, killConsumer, killConsumer, killNATS, killNATS}
	if e.proxy != nil {
		kinds = append(kinds, pgCut, pgFreeze, pgDropClient)
	}
	if name == "ordered" {
		// The consumer's kills: what an ordered consumer must survive
		// without running a key's later message first.
		kinds = []string{killConsumer, killConsumer, killConsumer, killConsumer, killRelay}
	}
	if e.cdc != "" {
		// The log-based relay's kills mid-stream, above all: each new
		// process streams from the slot's confirmed LSN.
		kinds = []string{killRelay, killRelay, killRelay, killRelay, killRelay, killProducer, killConsumer, killConsumer, killNATS}
	}
	if len(st.faults) > 0 {
		var only []string
		for _, k := range kinds {
			if slices.ContainsFunc(st.faults, func(f string) bool { return strings.HasPrefix(k, f+" ") }) {
				only = append(only, k)
			}
		}
		if len(only) == 0 {
			t.Fatalf("TXBOX_CRASH_FAULTS=%s: none of this scenario's faults (%s)", strings.Join(st.faults, ","), strings.Join(kinds, ", "))
		}
		kinds = only
	}
	var faults []fault
	kills := 0
	begin := time.Now()
	for (time.Since(begin) < st.duration || kills < st.minKills) && time.Since(begin) < 3*st.duration+time.Minute {
		time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(800*time.Millisecond))))
		f := fault{kind: kinds[rng.IntN(len(kinds))], at: time.Since(begin)}
		lastID := e.count("SELECT coalesce(max(id), 0) FROM crash_effects")
		start := time.Now()
		switch f.kind {
		case killRelay, killProducer, killConsumer, killNATS:
			p := e.procs[map[string]string{killRelay: "relay", killProducer: "producer", killConsumer: "consumer", killNATS: "natsd"}[f.kind]]
			p.Kill()
			kills++
			down := time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
			if f.kind == killNATS {
				down = time.Duration(rng.Int64N(int64(time.Second)))
			}
			time.Sleep(down)
			testenv.Must(t, p.Start(), "restart %s", p.name)
		case pgCut, pgFreeze, pgDropClient:
			map[string]func(){pgCut: e.proxy.Cut, pgFreeze: e.proxy.Freeze, pgDropClient: e.proxy.DropClient}[f.kind]()
			time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second))))
			e.proxy.Resume()
		}
		end := time.Now()
		f.lasted = end.Sub(start)
		f.recovery, f.stalled = e.nextDelivery(lastID, end)
		faults = append(faults, f)
		e.note("fault %d %s from %s to %s, next effect %s later", len(faults), f.kind,
			start.Format("15:04:05.000"), end.Format("15:04:05.000"), f.recovery.Round(time.Millisecond))
	}
	faulting := time.Since(begin)

	// The end: no more writes, every committed message delivered, then the
	// ledger.
	e.procs["producer"].Stop()
	drainStart := time.Now()
	drained := waitProgress(st.drain, func() (bool, string) {
		pending, effects := e.count(e.pendingQuery()), e.count("SELECT count(DISTINCT msg_id) FROM crash_effects")
		return pending == 0 && effects >= e.count("SELECT count(*) FROM crash_orders"), fmt.Sprintf("%d pending, %d effects", pending, effects)
	})
	drain := time.Since(drainStart)
	time.Sleep(500 * time.Millisecond) // let late duplicates land, if any
	e.procs["consumer"].Stop()
	e.procs["relay"].Stop()
	inStream := readStream(t, stream)
	dead := readStream(t, dlq)
	e.procs["natsd"].Stop()

	l := e.buildLedger(inStream, len(dead))
	l.scenario, l.seed, l.faulting, l.drain, l.faults = name, st.seed, faulting, drain, faults
	if e.cdc != "" {
		l.scenario += " (" + e.cdc + " mode)"
	}
	for _, n := range []string{"relay", "producer", "consumer", "natsd"} {
		_, exits := e.procs[n].counts()
		l.exits += exits
	}
	report := l.String()
	t.Log("\n" + report)
	appendReport(st.report, report)
	if !drained {
		t.Errorf("crash %s: the backlog was not delivered: nothing was for %s", name, st.drain)
	}
	if bad := l.violations(); bad != "" {
		t.Errorf("crash %s: %s", name, bad)
	}
	if kills < st.minKills {
		t.Errorf("crash %s: %d kills, want at least %d", name, kills, st.minKills)
	}
	return kills
}

// pendingQuery counts the outbox rows not yet delivered: the log-based
// relay marks no row (its slot's confirmed LSN is the mark), so there only
// a row it recorded dead and that was redriven, still unpublished, is
// pending.
func (e *env) pendingQuery() string {
	if e.cdc != "" {
		return "SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL AND last_error IS NOT NULL AND dead_at IS NULL"
	}
	return "SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL AND dead_at IS NULL"
}

// note appends a line to faults.log in the work dir: what the harness did
// when, to line up with the processes' logs.
func (e *env) note(format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(e.dir, "faults.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, format+"\n", args...)
}

func (e *env) add(name string, argv ...string) {
	e.procs[name] = &proc{name: name, argv: argv, log: filepath.Join(e.dir, name+".log")}
}

// count runs a query returning one integer on the ledger's connection.
func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := e.ledger.QueryRowContext(ctx, crashdb.Q(e.dialect, query), args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// nextDelivery waits for the first effect after lastID applied after end,
// and returns how long after end it was applied.
func (e *env) nextDelivery(lastID int, end time.Time) (time.Duration, bool) {
	for time.Since(end) < recoveryCap {
		var us sql.NullInt64
		err := e.ledger.QueryRow(crashdb.Q(e.dialect, "SELECT min(applied_us) FROM crash_effects WHERE id > ? AND applied_us >= ?"),
			lastID, end.UnixMicro()).Scan(&us)
		if err != nil {
			e.t.Fatalf("next delivery: %v", err)
		}
		if us.Valid {
			return max(time.UnixMicro(us.Int64).Sub(end), 0), false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return recoveryCap, true
}

// dumpLogs prints the end of every process's log.
func (e *env) dumpLogs() {
	for _, n := range []string{"faults", "natsd", "relay", "consumer", "producer"} {
		p := e.procs[n]
		if n == "faults" {
			p = &proc{log: filepath.Join(e.dir, "faults.log")}
		}
		if p == nil {
			continue
		}
		b, err := os.ReadFile(p.log)
		if err != nil {
			e.t.Logf("%s: %v", p.log, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 150 {
			lines = append([]string{fmt.Sprintf("… %d earlier lines in %s", len(lines)-150, p.log)}, lines[len(lines)-150:]...)
		}
		e.t.Logf("=== %s log (%s):\n%s", n, p.log, strings.Join(lines, "\n"))
	}
}

// streamMsg is one message read back from a stream.
type streamMsg struct {
	seq uint64
	id  string
}

// readStream reads every message of s in order.
func readStream(t *testing.T, s jetstream.Stream) []streamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := s.Info(ctx)
	testenv.Must(t, err, "stream info")
	if info.State.Msgs == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	testenv.Must(t, err, "ordered consumer")
	var out []streamMsg
	for uint64(len(out)) < info.State.Msgs {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		testenv.Must(t, err, "fetch")
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			testenv.Must(t, err, "metadata")
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if id == "" {
				id = m.Headers().Get("Txbox-Message-Id")
			}
			out = append(out, streamMsg{seq: md.Sequence.Stream, id: id})
			n++
		}
		if n == 0 {
			t.Fatalf("stream %s: read %d of %d messages, then nothing", info.Config.Name, len(out), info.State.Msgs)
		}
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "free port")
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitProgress polls cond every 100 ms and returns true once it holds, or
// false once what cond shows stayed the same for quiet: a slow machine
// that keeps making progress is never cut short.
func waitProgress(quiet time.Duration, cond func() (bool, string)) bool {
	last, since := "", time.Now()
	for {
		ok, state := cond()
		if ok {
			return true
		}
		if state != last {
			last, since = state, time.Now()
		}
		if time.Since(since) > quiet {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
