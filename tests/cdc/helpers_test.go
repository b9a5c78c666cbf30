// Package cdc_test tests the log-based relay (txboxpgx/cdc) on PostgreSQL
// clusters of the tests' own, with wal_level=logical: delivery in commit
// order, a broker outage, a server crash, a lease takeover, a lost slot,
// and the txbox binary killed mid-stream.
package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

// logicalCluster starts a private cluster that can decode its WAL, with
// the outbox table migrated, and returns it and a pool on it.
func logicalCluster(t testing.TB, settings ...string) (*testenv.Cluster, *pgxpool.Pool) {
	t.Helper()
	c := testenv.PrivatePostgres(t, append([]string{"wal_level=logical", "max_replication_slots=8", "max_wal_senders=8"}, settings...)...)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(c.URL)
	testenv.Must(t, err, "pool config")
	pc.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	testenv.Must(t, err, "pool")
	t.Cleanup(pool.Close)
	m, err := txboxmigrate.New(txboxpgx.New(pool), txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	_, err = pool.Exec(ctx, `CREATE TABLE key_seq (key text PRIMARY KEY, n int NOT NULL DEFAULT 0)`)
	testenv.Must(t, err, "key_seq")
	return c, pool
}

// ledger is a publisher that records what the broker acknowledged, in
// order; fail, when set, decides a message's error.
type ledger struct {
	mu    sync.Mutex
	acked []txbox.Message
	fail  func(m txbox.Message) error
}

func (l *ledger) Publish(_ context.Context, msgs []txbox.Message) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for i, m := range msgs {
		if l.fail != nil {
			if err := l.fail(m); err != nil {
				if errs == nil {
					errs = make([]error, len(msgs))
				}
				errs[i] = err
				continue
			}
		}
		l.acked = append(l.acked, m)
	}
	return errs
}

func (l *ledger) setFail(f func(m txbox.Message) error) {
	l.mu.Lock()
	l.fail = f
	l.mu.Unlock()
}

func (l *ledger) snapshot() []txbox.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked)
}

// writeTx commits one transaction adding a message for each key: the
// payload is "key:n", n the key's sequence number taken in the same
// transaction (a row lock on key_seq), so that the numbers of a key are
// in commit order.
func writeTx(ctx context.Context, pool *pgxpool.Pool, ob *txbox.Outbox[pgx.Tx], keys ...string) error {
	keys = slices.Clone(keys)
	slices.Sort(keys) // one lock order: no deadlocks
	keys = slices.Compact(keys)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var msgs []txbox.Message
		for _, k := range keys {
			var n int
			err := tx.QueryRow(ctx, `INSERT INTO key_seq (key, n) VALUES ($1, 1)
			    ON CONFLICT (key) DO UPDATE SET n = key_seq.n + 1 RETURNING n`, k).Scan(&n)
			if err != nil {
				return err
			}
			msgs = append(msgs, txbox.Message{Topic: "cdc.test", Key: k, Payload: []byte(k + ":" + strconv.Itoa(n))})
		}
		_, err := ob.Add(ctx, tx, msgs...)
		return err
	})
}

// committed returns the key sequence table: the last number of each key.
func committed(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT key, n FROM key_seq`)
	testenv.Must(t, err, "key_seq")
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		testenv.Must(t, rows.Scan(&k, &n), "scan")
		out[k] = n
	}
	testenv.Must(t, rows.Err(), "key_seq rows")
	return out
}

// verdict checks the ledger against what committed: every message of
// every key acknowledged (0 lost), none that did not commit (0 phantom),
// and each key's messages first acknowledged in commit order, none before
// its predecessor. It returns how many acks were duplicates.
func verdict(t *testing.T, acked []txbox.Message, want map[string]int) (dups int) {
	t.Helper()
	seen := map[string]int{} // key -> highest n acknowledged
	ids := map[string]bool{}
	for _, m := range acked {
		if ids[m.ID] {
			dups++
		}
		ids[m.ID] = true
		k, ns, _ := strings.Cut(string(m.Payload), ":")
		n, _ := strconv.Atoi(ns)
		if k != m.Key || n == 0 {
			t.Fatalf("phantom or garbled message: key %q payload %q", m.Key, m.Payload)
		}
		if n > want[k] {
			t.Fatalf("phantom: %s:%d acknowledged, but only %d committed", k, n, want[k])
		}
		if n > seen[k]+1 {
			t.Fatalf("order: %s:%d acknowledged before %s:%d", k, n, k, seen[k]+1)
		}
		seen[k] = max(seen[k], n)
	}
	for k, n := range want {
		if seen[k] != n {
			t.Fatalf("lost: key %s has %d committed, %d acknowledged", k, n, seen[k])
		}
	}
	return dups
}

// eventually polls cond until it holds; it fails after stall without a
// change in what cond reports.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	const stall = 2 * time.Minute
	last, since := "", time.Now()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if state != last {
			last, since = state, time.Now()
		}
		if time.Since(since) > stall {
			t.Fatalf("no progress for %s waiting for: %s: %s", stall, what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// delivered waits until the ledger holds every committed message.
func delivered(t *testing.T, l *ledger, pool *pgxpool.Pool) {
	t.Helper()
	want := committed(t, pool)
	total := 0
	for _, n := range want {
		total += n
	}
	eventually(t, "every committed message acknowledged", func() (bool, string) {
		ids := map[string]bool{}
		for _, m := range l.snapshot() {
			ids[m.ID] = true
		}
		return len(ids) >= total, fmt.Sprintf("%d of %d", len(ids), total)
	})
}

// othersDelivered waits until the ledger holds every committed message but
// one, the dead one.
func othersDelivered(t *testing.T, l *ledger, pool *pgxpool.Pool) {
	t.Helper()
	total := -1
	for _, n := range committed(t, pool) {
		total += n
	}
	eventually(t, "the others delivered", func() (bool, string) {
		n := len(l.snapshot())
		return n >= total, fmt.Sprintf("%d of %d", n, total)
	})
}

// benchSize is the positive integer in the environment variable name, or
// def; benchOnly skips t unless TXBOX_CDC_BENCH=1.
func benchSize(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func benchOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("TXBOX_CDC_BENCH") != "1" {
		t.Skip("a benchmark: set TXBOX_CDC_BENCH=1")
	}
}

func keysOf(n int) []string {
	var ks []string
	for i := range n {
		ks = append(ks, fmt.Sprintf("k%02d", i))
	}
	return ks
}

func newRelay(t *testing.T, pool *pgxpool.Pool, pub txbox.Publisher, cfg cdc.Config) *cdc.Relay {
	t.Helper()
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 50 * time.Millisecond
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = 200 * time.Millisecond
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = 10 * time.Millisecond
	}
	r, err := cdc.New(pool, pub, cfg)
	testenv.Must(t, err, "cdc.New")
	return r
}

func start(t *testing.T, r *cdc.Relay) {
	t.Helper()
	testenv.Must(t, r.Start(context.Background()), "start")
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
}

// slot reads the slot's status.
func slot(t *testing.T, pool *pgxpool.Pool, cfg cdc.Config) *cdc.SlotStatus {
	t.Helper()
	st, err := cdc.Status(context.Background(), pool, cfg)
	testenv.Must(t, err, "slot status")
	return st
}

// confirmedPast waits until the slot's confirmed LSN reaches the server's
// WAL position of now.
func confirmedPast(t *testing.T, pool *pgxpool.Pool, cfg cdc.Config, what string) {
	t.Helper()
	var now string
	testenv.Must(t, pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&now), "wal lsn")
	eventually(t, "the slot confirmed past "+what, func() (bool, string) {
		st := slot(t, pool, cfg)
		var past bool
		testenv.Must(t, pool.QueryRow(context.Background(), `SELECT $1::pg_lsn >= $2::pg_lsn`, st.ConfirmedFlushLSN, now).Scan(&past), "compare")
		return past, fmt.Sprintf("confirmed %s, WAL was at %s", st.ConfirmedFlushLSN, now)
	})
}

// poisoned creates cfg's slot on pool and starts a relay into a ledger
// that rejects the message whose payload is payload (reason as the error)
// until the test calls l.setFail(nil).
func poisoned(t *testing.T, pool *pgxpool.Pool, cfg cdc.Config, payload, reason string) (*ledger, *cdc.Relay) {
	t.Helper()
	_, err := cdc.CreateSlot(context.Background(), pool, cfg)
	testenv.Must(t, err, "create slot")
	l := &ledger{}
	l.setFail(rejecting(payload, reason))
	r := newRelay(t, pool, l, cfg)
	start(t, r)
	return l, r
}

// rejecting fails the message whose payload is payload with a rejection
// (reason as the error) and lets every other message through.
func rejecting(payload, reason string) func(txbox.Message) error {
	return func(m txbox.Message) error {
		if string(m.Payload) == payload {
			return txbox.Reject(errors.New(reason))
		}
		return nil
	}
}

// statsOf is r.Stats: the relay's counters and state, and its slot's
// figures when the slot could be read.
func statsOf(r *cdc.Relay) cdc.Stats {
	st, _ := r.Stats(context.Background())
	return st
}

// progress is what the relay r has done so far, into the ledger l: how
// many messages the broker acknowledged, the relay's counters, its
// confirmed LSN and whether it reads the slot, and why it stopped if it
// did. A wait for an outcome that shows no change of its own until it
// comes (a row recorded dead) reports it, so that the wait is bounded by
// the relay's progress rather than by a total time.
func progress(r *cdc.Relay, l *ledger) string {
	st := statsOf(r)
	s := fmt.Sprintf("%d acknowledged, relay published %d dead %d confirmed %s reading %t",
		len(l.snapshot()), st.Published, st.Dead, st.ConfirmedLSN, st.Reading)
	select {
	case <-r.Stopped():
		s += fmt.Sprintf(", stopped: %v", r.Err())
	default:
	}
	return s
}

// outcomes is a relay Observer that counts each message outcome the
// relay reports and the messages of publishes that failed.
type outcomes struct {
	mu      sync.Mutex
	settled map[txbox.Outcome]int
	failed  int
}

func (o *outcomes) Claimed(int, time.Duration) {}
func (o *outcomes) Published(_, failed int, _ time.Duration) {
	o.mu.Lock()
	o.failed += failed
	o.mu.Unlock()
}
func (o *outcomes) Settled(_ string, outcome txbox.Outcome, _ time.Duration) {
	o.mu.Lock()
	if o.settled == nil {
		o.settled = map[txbox.Outcome]int{}
	}
	o.settled[outcome]++
	o.mu.Unlock()
}
func (o *outcomes) RoundFailed(string)        {}
func (o *outcomes) Sampled(txbox.RelaySample) {}

// count is how many messages the relay reported with outcome.
func (o *outcomes) count(outcome txbox.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.settled[outcome]
}

// failures is how many messages of publishes failed.
func (o *outcomes) failures() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}
