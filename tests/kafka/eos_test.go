package kafka_test

// Exactly-once into Kafka, tried with the txbox binary as the relay,
// SIGKILLed at chosen and at random moments, against franz-go's kfake (an
// in-process fake cluster that implements transactions: figures and
// verdicts here are kfake's, not Kafka's). See docs/reference/guarantees.md
// ("Kafka transactions").

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// TestMain removes the txbox binary the tests built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		_ = os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// txboxBinary builds the txbox binary once per test run, in workspace mode
// from the repository's root.
func txboxBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "txbox-eos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "github.com/txbox/txbox/cmd/txbox")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		builtBin = filepath.Join(dir, "txbox")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// relayProc is the txbox binary running `txbox relay`, started again and
// again, its output appended to a log file.
type relayProc struct {
	argv []string
	log  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
	exited []string // exits the test did not cause
}

func (p *relayProc) start(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	testenv.Must(t, err, "relay log")
	p.starts++
	fmt.Fprintf(f, "=== test: start #%d at %s\n", p.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("start relay: %v", err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if p.cmd == cmd {
			p.cmd = nil
			p.exited = append(p.exited, fmt.Sprint(err))
			fmt.Fprintf(f, "=== test: relay exited by itself: %v\n", err)
		}
		p.mu.Unlock()
		_ = f.Close()
		close(done)
	}()
}

// kill SIGKILLs the relay, if it runs, and waits until it is gone.
func (p *relayProc) kill() bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return false
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return true
}

func (p *relayProc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}

// eosEnv is a PostgreSQL schema with an outbox, a kfake cluster with the
// topic, and the relay binary between them.
type eosEnv struct {
	t      *testing.T
	c      *kfake.Cluster
	topic  string
	pool   *pgxpool.Pool
	ob     *txbox.Outbox[pgx.Tx]
	relay  *relayProc
	keys   int
	mu     sync.Mutex
	next   map[string]int // per key, the next sequence number to add
	added  int
	txnID  string
	batch  int
	prefix string
}

// newEOS sets up the environment, with messages spread over keys; txnID
// "" runs the relay with the idempotent producer.
func newEOS(t *testing.T, txnID string, batch, keys int) *eosEnv {
	t.Helper()
	bin := txboxBinary(t)
	pool, schema := testenv.Postgres(t, 4)
	drv := txboxpgx.New(pool)
	if out, err := exec.Command(bin, "migrate", "up", "--db", testenv.PostgresURL(), "--schema", schema).CombinedOutput(); err != nil {
		t.Fatalf("txbox migrate up: %v\n%s", err, out)
	}
	ob, err := txbox.New(drv, txbox.Config{Schema: schema})
	testenv.Must(t, err, "txbox.New")
	c := cluster(t)
	prefix := testenv.Name("eos") + "."
	topic := prefix + "orders"
	testenv.Must(t, c.CreateTopic(topic, 3, nil), "create topic")
	e := &eosEnv{t: t, c: c, topic: topic, pool: pool, ob: ob, keys: keys, next: map[string]int{}, txnID: txnID, batch: batch, prefix: prefix}
	argv := []string{bin, "relay", "--db", testenv.PostgresURL(), "--schema", schema,
		"--broker", "kafka://" + strings.Join(c.ListenAddrs(), ","), "--subject-prefix", prefix,
		"--batch-size", strconv.Itoa(batch), "--poll-interval", "50ms", "--publish-timeout", "2s",
		"--stats-interval", "0", "--log-level", cmp.Or(os.Getenv("TXBOX_EOS_LOG_LEVEL"), "warn")}
	if txnID != "" {
		argv = append(argv, "--kafka-transactional-id", txnID)
	}
	e.relay = &relayProc{argv: argv, log: filepath.Join(t.TempDir(), "relay.log")}
	t.Cleanup(func() {
		e.relay.kill()
		if t.Failed() {
			t.Logf("relay log (%s):\n%s", e.relay.log, e.relay.tail())
		}
	})
	return e
}

// add commits n messages, spread over the keys in turn, each key's
// payload its sequence number.
func (e *eosEnv) add(n int) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	msgs := make([]txbox.Message, 0, n)
	for range n {
		key := fmt.Sprintf("k%02d", e.added%e.keys)
		seq := e.next[key]
		e.next[key]++
		e.added++
		msgs = append(msgs, txbox.Message{ID: fmt.Sprintf("%s-%06d", key, seq), Topic: "orders", Key: key, Payload: []byte(strconv.Itoa(seq))})
	}
	_, err := e.ob.AddNoTx(context.Background(), msgs...)
	testenv.Must(e.t, err, "add")
}

func (e *eosEnv) pending() int {
	e.t.Helper()
	var n int
	err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL AND dead_at IS NULL").Scan(&n)
	testenv.Must(e.t, err, "count pending")
	return n
}

// drain waits until no row is pending: it fails once the count of pending
// rows has not moved for a minute.
func (e *eosEnv) drain() {
	e.t.Helper()
	last, since := -1, time.Now()
	for {
		n := e.pending()
		if n == 0 {
			return
		}
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > time.Minute {
			e.t.Fatalf("%d rows pending, no change for a minute", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rec is one record read back.
type rec struct {
	id        string
	key       string
	seq       int
	partition int32
	offset    int64
	pid       int64
	epoch     int16
}

// read reads the whole topic from its start: with committed,
// read_committed (what a consumer of the relay's transactions sees),
// else read_uncommitted. It reads until it has seen want distinct ids and
// then nothing new has come for two seconds; it fails when nothing new
// has come for half a minute before that.
func (e *eosEnv) read(committed bool, want int) []rec {
	e.t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.ConsumeTopics(e.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchIsolationLevel(iso))
	testenv.Must(e.t, err, "reader")
	defer cl.Close()
	var out []rec
	ids := map[string]bool{}
	lastNew := time.Now()
	for {
		quiet := 30 * time.Second
		if len(ids) >= want {
			quiet = 2 * time.Second
		}
		if time.Since(lastNew) > quiet {
			if len(ids) < want {
				e.t.Fatalf("read %d distinct ids of %d, then nothing for %s", len(ids), want, quiet)
			}
			return out
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			x := rec{key: string(r.Key), partition: r.Partition, offset: r.Offset, pid: r.ProducerID, epoch: r.ProducerEpoch}
			x.seq, _ = strconv.Atoi(string(r.Value))
			for _, h := range r.Headers {
				if h.Key == txbox.HeaderMessageID {
					x.id = string(h.Value)
				}
			}
			out = append(out, x)
			ids[x.id] = true
			lastNew = time.Now()
		})
	}
}

// ledger is what a read_committed consumer saw, against what was
// committed to the outbox.
type ledger struct {
	records, distinct, lost, dupes int
	dupIDs                         []string
	orderErrs                      []string
}

func (l ledger) String() string {
	return fmt.Sprintf("records %d, distinct %d, lost %d, duplicates %d, order violations %d", l.records, l.distinct, l.lost, l.dupes, len(l.orderErrs))
}

// check builds the ledger of recs: every added message once or more, and
// per key, once the copies already seen are dropped (as an inbox drops
// them), the sequence numbers in order with none missing.
func (e *eosEnv) check(recs []rec) ledger {
	e.t.Helper()
	l := ledger{records: len(recs)}
	seen := map[string]int{}
	nextSeq := map[string]int{}
	for _, r := range recs { // per partition in offset order, which is each key's order
		seen[r.id]++
		if seen[r.id] > 1 {
			l.dupes++
			l.dupIDs = append(l.dupIDs, r.id)
			continue
		}
		if r.seq != nextSeq[r.key] {
			l.orderErrs = append(l.orderErrs, fmt.Sprintf("key %s: %d after %d", r.key, r.seq, nextSeq[r.key]-1))
		}
		nextSeq[r.key] = r.seq + 1
	}
	l.distinct = len(seen)
	e.mu.Lock()
	for key, n := range e.next {
		for s := range n {
			if seen[fmt.Sprintf("%s-%06d", key, s)] == 0 {
				l.lost++
			}
		}
	}
	e.mu.Unlock()
	return l
}

// byPartition orders recs per partition by offset.
func byPartition(recs []rec) {
	slices.SortStableFunc(recs, func(a, b rec) int {
		if a.partition != b.partition {
			return int(a.partition - b.partition)
		}
		return int(a.offset - b.offset)
	})
}

// killAt kills the relay from a kfake control function on the nth
// request of key that carries the relay's records (a Produce to the
// topic, or an EndTxn committing), before the cluster handles it: the
// cluster then handles it as if the relay had died just after sending
// it. It returns how many kills it made (0 or 1).
func (e *eosEnv) killAt(key kmsg.Key, nth int) *atomic.Int32 {
	var seen, killed atomic.Int32
	id := e.c.TopicInfo(e.topic).TopicID
	e.c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		switch r := req.(type) {
		case *kmsg.ProduceRequest:
			if !slices.ContainsFunc(r.Topics, func(t kmsg.ProduceRequestTopic) bool { return t.Topic == e.topic || t.TopicID == id }) {
				e.c.KeepControl()
				return nil, nil, false
			}
		case *kmsg.EndTxnRequest:
			if !r.Commit || r.TransactionalID != e.txnID {
				e.c.KeepControl()
				return nil, nil, false
			}
		}
		if seen.Add(1) < int32(nth) {
			e.c.KeepControl()
			return nil, nil, false
		}
		if e.relay.kill() {
			killed.Add(1)
		}
		e.c.DropControl()
		return nil, nil, false
	})
	return &killed
}

// The relay dies after a produce request of a batch reached the cluster
// and before the batch's commit. With transactions, the restarted relay
// (same transactional id) aborts the open transaction and sends the batch
// again: a read_committed consumer sees none of the aborted copies, which
// are in the log (read_uncommitted sees them), and twice only the batches
// committed and not yet marked beside it (the rounds in flight). With the
// idempotent producer the stored records are visible and the batch sent
// again lands twice: that mode's subtest checks that the kill bites.
// Every message has a key of its own, so that each batch is one Publish
// call (a batch holding several messages of a key is published in waves,
// one transaction each: TestRelayKilledBetweenWaves).
func TestRelayKilledMidTransaction(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"transactional", "idempotent"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			txnID := ""
			if mode == "transactional" {
				txnID = testenv.Name("relay")
			}
			e := newEOS(t, txnID, 100, 400)
			e.add(400)
			killed := e.killAt(kmsg.Produce, 2)
			e.relay.start(t)
			e.waitProgress("the relay killed at its second produce request", func() bool { return killed.Load() == 1 })
			e.relay.start(t)
			start := time.Now()
			e.drain()
			t.Logf("drained in %s", time.Since(start))
			e.relay.kill()
			recs := e.read(true, 400)
			byPartition(recs)
			l := e.check(recs)
			t.Logf("kfake, %s, read_committed: %s", mode, l)
			if l.lost > 0 || len(l.orderErrs) > 0 {
				t.Fatalf("lost %d, order violations %v", l.lost, l.orderErrs)
			}
			all := e.read(false, 400)
			if mode == "idempotent" {
				if l.dupes == 0 {
					t.Fatalf("idempotent producer: no duplicate after the kill (%d records in the log): the kill did not land between a stored produce and the marks", len(all))
				}
				return
			}
			// The killed transaction is aborted, so none of its messages
			// comes twice; the batches before it that were committed and
			// not yet marked (the rounds in flight) come again whole.
			if l.dupes > (inFlight-1)*100 {
				t.Fatalf("transactional: a read_committed consumer saw %d duplicates (%v), more than the %d batches in flight beside the killed one", l.dupes, l.dupIDs, inFlight-1)
			}
			if bad := windowViolations(recs, 1, 100); bad != "" {
				t.Fatalf("transactional: %s", bad)
			}
			if len(all) <= l.records {
				t.Fatalf("read_uncommitted saw %d records, read_committed %d: the killed transaction's records never reached the log", len(all), l.records)
			}
			t.Logf("kfake, transactional: %d records of the aborted transaction in the log, unseen by read_committed", len(all)-l.records)
		})
	}
}

// inFlight is how many batches a relay has in flight at most: three
// rounds while its batches come full (docs/design/relay.md).
const inFlight = 3

// The window: the relay dies after its commit reached the cluster and
// before it marked the batch's rows. The restarted relay sends the batch
// again in a new transaction, which commits too: a read_committed
// consumer sees those messages twice, at most the batches a relay has in
// flight (inFlight), and the inbox drops the copies.
// docs/reference/guarantees.md names this window.
func TestRelayKilledAfterCommit(t *testing.T) {
	t.Parallel()
	const batch = 50
	e := newEOS(t, testenv.Name("relay"), batch, 300)
	e.add(300)
	killed := e.killAt(kmsg.EndTxn, 2)
	e.relay.start(t)
	e.waitProgress("the relay killed at its second commit", func() bool { return killed.Load() == 1 })
	e.relay.start(t)
	e.drain()
	e.relay.kill()
	recs := e.read(true, 300)
	byPartition(recs)
	l := e.check(recs)
	t.Logf("kfake, transactional, killed at a commit: %s", l)
	if l.lost > 0 || len(l.orderErrs) > 0 {
		t.Fatalf("lost %d, order violations %v", l.lost, l.orderErrs)
	}
	t.Logf("sent again: %v", l.dupIDs)
	if l.dupes == 0 || l.dupes > inFlight*batch {
		t.Fatalf("%d duplicates, want 1 to %d: the committed, unmarked batches (inFlight) sent again", l.dupes, inFlight*batch)
	}
}

// A batch holding several messages of a key is published in waves (the
// relay sends a key's next message once the broker acknowledged the one
// before), one Publish call and so one transaction each; the batch's rows
// are marked after its last wave. The relay dies at a later wave's
// produce: that wave's transaction is aborted, but the waves before it
// committed, and the restarted relay sends them again. This widens the
// window to the whole batch: duplicates, at most a batch, all from the
// waves committed before the kill.
func TestRelayKilledBetweenWaves(t *testing.T) {
	t.Parallel()
	const batch = 100
	e := newEOS(t, testenv.Name("relay"), batch, 4) // 25 messages per key per batch
	e.add(400)
	killed := e.killAt(kmsg.Produce, 3)
	e.relay.start(t)
	e.waitProgress("the relay killed at its third produce request", func() bool { return killed.Load() == 1 })
	e.relay.start(t)
	e.drain()
	e.relay.kill()
	recs := e.read(true, 400)
	byPartition(recs)
	l := e.check(recs)
	t.Logf("kfake, transactional, killed at a later wave: %s; sent again: %v", l, l.dupIDs)
	if l.lost > 0 || len(l.orderErrs) > 0 {
		t.Fatalf("lost %d, order violations %v", l.lost, l.orderErrs)
	}
	if l.dupes > inFlight*batch {
		t.Fatalf("%d duplicates, over the batches in flight (%d)", l.dupes, inFlight*batch)
	}
}

// waitProgress waits for cond, failing once it has been false while the
// count of pending rows stayed the same for a minute, or the relay exited
// by itself.
func (e *eosEnv) waitProgress(what string, cond func() bool) {
	t := e.t
	t.Helper()
	last, since := e.pending(), time.Now()
	for !cond() {
		e.relay.mu.Lock()
		exited := len(e.relay.exited)
		e.relay.mu.Unlock()
		if exited > 0 {
			t.Fatalf("waiting for %s: the relay exited by itself", what)
		}
		if p := e.pending(); p != last {
			last, since = p, time.Now()
		}
		if time.Since(since) > time.Minute {
			t.Fatalf("waiting for %s: no progress for a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eosKills is the number of SIGKILLs of TestRelayCrashLedger
// (TXBOX_KAFKA_CRASH_KILLS, default 12).
func eosKills(t *testing.T) int {
	if v := os.Getenv("TXBOX_KAFKA_CRASH_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TXBOX_KAFKA_CRASH_KILLS=%q: want a number, 1 or more", v)
		}
		return n
	}
	return 12
}

// The relay, with transactions, SIGKILLed again and again at random
// moments while rows keep coming; then a read_committed consumer's
// ledger: nothing lost, each key in order, and duplicates only from the
// window: a message seen twice was first committed in a transaction whose
// rows were not marked when the relay died. Such a transaction is sent
// again whole, and with it the other transactions whose rows were not
// marked either (the earlier waves of its batch, the batches of the other
// rounds in flight, whose transactions alternate with it): per kill, one
// run of transactions sent again, before the next relay sends the copies,
// of at most the batches a relay has in flight (inFlight). A commit that
// lands while Publish reports it failed would add a run.
// The idempotent producer fails this check: its records carry one epoch
// per relay process, and of a process's messages only the last ones come
// again, so a "transaction" comes again in part.
func TestRelayCrashLedger(t *testing.T) {
	t.Parallel()
	const batch = 100
	kills := eosKills(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TXBOX_KAFKA_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		testenv.Must(t, err, "TXBOX_KAFKA_CRASH_SEED")
		seed = n
	}
	t.Logf("seed %d (TXBOX_KAFKA_CRASH_SEED), %d kills (TXBOX_KAFKA_CRASH_KILLS)", seed, kills)
	rng := rand.New(rand.NewPCG(seed, 41))
	e := newEOS(t, testenv.Name("relay"), batch, 16)
	e.add(2000) // a backlog, so that kills land mid-batch as well as idle
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				e.add(5)
			}
		}
	})
	e.relay.start(t)
	for range kills {
		// Long enough for a relay to publish and mark several batches
		// before it dies: what it sent before its last ones must not come
		// again.
		time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond))))
		e.relay.kill()
		time.Sleep(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
		e.relay.start(t)
	}
	close(stop)
	wg.Wait()
	e.drain()
	e.relay.kill()
	if len(e.relay.exited) > 0 {
		t.Errorf("the relay exited by itself %d times: %v", len(e.relay.exited), e.relay.exited)
	}
	recs := e.read(true, e.added)
	byPartition(recs)
	l := e.check(recs)
	all := e.read(false, e.added)
	t.Logf("kfake, transactional, %d SIGKILLs, batch %d: %s; %d records of aborted transactions in the log, unseen by read_committed", kills, batch, l, len(all)-l.records)
	if l.lost > 0 || len(l.orderErrs) > 0 {
		t.Fatalf("lost %d, order violations %v", l.lost, l.orderErrs)
	}
	if bad := windowViolations(recs, kills, batch); bad != "" {
		t.Fatal(bad)
	}
}

// windowViolations checks that every duplicate of recs comes from the
// window; see TestRelayCrashLedger. A record's producer id and epoch name
// its transaction (the epoch changes at each transaction's end under
// KIP-890 part 2, which kfake implements, and at each start of a relay),
// and sorting them orders the transactions.
func windowViolations(recs []rec, kills, batch int) string {
	type txn struct {
		pid   int64
		epoch int16
	}
	type count struct{ first, again, copies int }
	counts := map[txn]*count{}
	firstAt := map[string]int{} // id → index of its first copy
	for i, r := range recs {
		if _, ok := firstAt[r.id]; !ok {
			firstAt[r.id] = i
			continue
		}
		t := txn{r.pid, r.epoch} // a transaction that sent r.id again
		if counts[t] == nil {
			counts[t] = &count{}
		}
		counts[t].copies++
	}
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.id]++
	}
	for id, i := range firstAt {
		t := txn{recs[i].pid, recs[i].epoch}
		if counts[t] == nil {
			counts[t] = &count{}
		}
		counts[t].first++
		if seen[id] > 1 {
			counts[t].again++
		}
	}
	txns := slices.SortedFunc(maps.Keys(counts), func(a, b txn) int {
		if a.pid != b.pid {
			return cmp.Compare(a.pid, b.pid)
		}
		return cmp.Compare(a.epoch, b.epoch)
	})
	// A run: the transactions sent again after one kill, those of the
	// killed relay's unmarked batches. The rounds in flight take turns on
	// the publisher, so the transactions of their batches alternate: a
	// run holds the transactions sent again up to the next transaction
	// that sends copies (the relay started after the kill), with the
	// transactions of marked batches among them.
	runs, total, open := 0, 0, false
	for _, t := range txns {
		c := counts[t]
		if c.copies > 0 {
			open = false
		}
		if c.again == 0 {
			continue
		}
		if c.again != c.first {
			return fmt.Sprintf("transaction (producer %d, epoch %d): %d of its %d messages delivered again: a transaction is re-sent whole or not at all",
				t.pid, t.epoch, c.again, c.first)
		}
		if !open {
			runs, open = runs+1, true
		}
		total += c.again
	}
	if runs > kills {
		return fmt.Sprintf("duplicates from %d runs of transactions sent again, each before the copies of the next relay, more than the %d kills", runs, kills)
	}
	if total > inFlight*kills*batch {
		return fmt.Sprintf("%d messages delivered again, over %d batches of %d for each of the %d kills", total, inFlight, batch, kills)
	}
	return ""
}

// Two relays started with one transactional id: the younger fences the
// older, which exits with an error naming the id (and is not restarted
// by itself: connecting again would fence the younger in turn); the
// younger drains the rest without being fenced, and a read_committed
// consumer misses nothing. The older's error is the fencing, or, when its
// commit raced the takeover, a commit refused as in an invalid state
// (kfake answers a commit one epoch behind that way):
// TestRelayWhoseProducerFailsExits has that case on its own.
func TestRelayFencedByItsSuccessor(t *testing.T) {
	t.Parallel()
	id := testenv.Name("relay")
	e := newEOS(t, id, 50, 16)
	e.add(200)
	e.relay.start(t)
	e.waitProgress("the first relay's first batches", func() bool { return e.pending() < 200 })
	older := e.relay
	younger := &relayProc{argv: older.argv, log: filepath.Join(t.TempDir(), "relay2.log")}
	t.Cleanup(func() {
		younger.kill()
		if t.Failed() {
			t.Logf("younger relay log:\n%s", younger.tail())
		}
	})
	younger.start(t)
	e.add(400) // rows for both to claim: the older one's next commit is fenced
	e.relay = younger
	e.drain()
	// The older relay exits by itself once fenced; it may have been idle
	// since, so rows keep coming until it has tried to publish.
	e.waitProgress("the older relay's exit", func() bool {
		older.mu.Lock()
		defer older.mu.Unlock()
		if len(older.exited) == 0 {
			older.mu.Unlock()
			e.add(10)
			older.mu.Lock()
		}
		return len(older.exited) > 0
	})
	if log := older.tail(); !strings.Contains(log, "another relay took over --kafka-transactional-id "+id) &&
		!strings.Contains(log, "the Kafka producer of --kafka-transactional-id "+id+" failed for good, maybe because another relay took the id over") {
		t.Fatalf("the older relay's log does not say it was fenced:\n%s", log)
	}
	e.drain()
	younger.mu.Lock()
	gone := younger.exited
	younger.mu.Unlock()
	if len(gone) > 0 {
		t.Fatalf("the younger relay exited (%v): the older one took the id back", gone)
	}
	younger.kill()
	recs := e.read(true, e.added)
	byPartition(recs)
	l := e.check(recs)
	t.Logf("kfake, two relays with one transactional id: %s", l)
	if l.lost > 0 || len(l.orderErrs) > 0 {
		t.Fatalf("lost %d, order violations %v", l.lost, l.orderErrs)
	}
}

// A transactional relay whose producer fails for good with an answer that
// does not say it was fenced (here a commit refused as in an invalid
// state, how a commit racing another relay's takeover can be answered)
// exits with an error naming the id, and does not initialise the id
// again: that would fence whichever relay took it over. Started again
// (what an operator or a supervisor decides), it drains the rest, and a
// read_committed consumer misses nothing.
func TestRelayWhoseProducerFailsExits(t *testing.T) {
	t.Parallel()
	id := testenv.Name("relay")
	e := newEOS(t, id, 50, 16)
	e.add(200)
	e.relay.start(t)
	e.waitProgress("the relay's first batches", func() bool { return e.pending() < 200 })
	inits := e.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, TxnID: id, Observe: true, Count: -1})
	defer inits.Remove()
	e.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: id, TopLevel: true, Err: kerr.InvalidTxnState})
	// The relay exits once it has tried to commit; it may have been idle,
	// so rows keep coming until it has. Bounded by progress: the count of
	// pending rows, which a relay that connected again drains.
	last, since := -1, time.Now()
	for {
		e.relay.mu.Lock()
		exited := len(e.relay.exited) > 0
		e.relay.mu.Unlock()
		if exited {
			break
		}
		if n := inits.Hits(); n > 0 {
			t.Fatalf("the relay initialised its transactional id again (%d InitProducerID) instead of exiting:\n%s", n, e.relay.tail())
		}
		n := e.pending()
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > time.Minute {
			t.Fatalf("the relay has not exited, and %d rows pending have not changed for a minute:\n%s", n, e.relay.tail())
		}
		if n < 10 {
			e.add(10)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := inits.Hits(); n > 0 {
		t.Fatalf("the relay initialised its transactional id again (%d InitProducerID) before it exited", n)
	}
	if log := e.relay.tail(); !strings.Contains(log, "the Kafka producer of --kafka-transactional-id "+id+" failed for good") ||
		!strings.Contains(log, "INVALID_TXN_STATE") {
		t.Fatalf("the relay's log does not say its producer failed for good:\n%s", log)
	}
	e.relay.start(t)
	e.drain()
	e.relay.kill()
	recs := e.read(true, e.added)
	byPartition(recs)
	l := e.check(recs)
	t.Logf("kfake, a relay whose commit was refused as in an invalid state, started again: %s", l)
	if l.lost > 0 || len(l.orderErrs) > 0 {
		t.Fatalf("lost %d, order violations %v", l.lost, l.orderErrs)
	}
}
