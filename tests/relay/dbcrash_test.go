package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// A PostgreSQL crash undoes the marks the relay committed lazily
// (guarantees.md, "When a message can be published twice", case 3): on a
// cluster of the test's own whose WAL writer is stopped (SIGSTOP) once the
// backlog is durable, so that no lazy commit reaches the WAL files, a
// relay drains part of a keyed backlog (20 keys: it claims runs, and
// remembers each key's last delivered row as its floor), the server
// crashes and comes back without those marks. The relay must publish every
// undone message again, each key from its first undone message, in order:
// nothing lost, no key's message sent before its predecessor was
// acknowledged (at least once), and the keys drained to the end — a floor
// the crash made stale must not block its key.
func TestDatabaseCrashUndoesLazyMarksInOrder(t *testing.T) {
	t.Parallel()
	// The background writer writes nothing, WAL buffers hold it all, and
	// the WAL writer is stopped below: every lazy commit after the last
	// durable one stays in the WAL buffers and is lost in the crash, however
	// fast the machine is. (A running WAL writer writes every full WAL
	// page, which survives the crash of the server's processes: only the
	// last page's marks would be lost, and only if a commit fell on it.)
	c := testenv.PrivatePostgres(t, "wal_writer_delay=10s", "wal_writer_flush_after=1GB", "wal_buffers=64MB",
		"bgwriter_lru_maxpages=0", "autovacuum=off")
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(c.URL)
	testenv.Must(t, err, "pool config")
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	testenv.Must(t, err, "pool")
	defer pool.Close()
	drv := txboxpgx.New(pool)
	migrateUp(t, drv)
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")

	const nKeys, perKey = 20, 100
	var keys []string
	var msgs []txbox.Message
	for k := range nKeys {
		keys = append(keys, fmt.Sprintf("k%02d", k))
	}
	for n := 1; n <= perKey; n++ {
		for _, k := range keys {
			msgs = append(msgs, txbox.Message{Topic: "t", Key: k, Payload: []byte(k + ":" + strconv.Itoa(n))})
		}
	}
	testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, msgs...)), "add") // a durable commit
	killWALWriter := holdWALWriter(t, pool)

	log := newRunLog(nil)
	r, err := relay.New(drv, log, relaytest.With(relay.Config{BatchSize: 50, PollInterval: 5 * time.Millisecond, DisableNotify: true}, relaytest.Config{BackoffMax: 100 * time.Millisecond}))
	testenv.Must(t, err, "relay.New")
	testenv.Must(t, r.Start(ctx), "start")
	defer r.Stop(context.WithoutCancel(ctx))

	const before = nKeys * perKey / 2
	testenv.Await(t, "half the backlog marked", func() (bool, string) {
		p := testenv.RelayStats(r).Published
		return p >= before, fmt.Sprintf("%d of %d marked", p, before)
	})
	markedBefore := testenv.RelayStats(r).Published
	// Killing a server process makes the postmaster end the others at
	// once, as a crash does; the immediate stop that follows (which a
	// stopped process would hold up) finds the WAL writer gone.
	killWALWriter()
	c.Crash()
	c.Start()
	testenv.Await(t, "the backlog drained after the crash", func() (bool, string) {
		var pending int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL").Scan(&pending); err != nil {
			return false, err.Error()
		}
		return pending == 0, fmt.Sprintf("%d rows pending", pending)
	})
	testenv.Must(t, r.Stop(ctx), "stop")

	log.mu.Lock()
	defer log.mu.Unlock()
	acked := map[string]int{} // key → highest n acknowledged
	last := map[string]int{}  // key → n of its last acknowledgement
	again := 0
	for _, e := range log.events {
		k, v, _ := strings.Cut(e.payload, ":")
		n, _ := strconv.Atoi(v)
		switch {
		case n > acked[k]+1:
			t.Fatalf("%s %s while %s:%d was never acknowledged", e.payload, map[bool]string{false: "sent", true: "acknowledged"}[e.acked], k, n-1)
		case e.acked && n > last[k]+1:
			// A key published again goes on from its first undone
			// message, in order: n … n+k again, never a message skipped.
			t.Fatalf("%s acknowledged right after %s:%d: the key's messages in between were not published again first", e.payload, k, last[k])
		}
		if e.acked {
			last[k] = n
		}
		switch {
		case e.acked && n <= acked[k]:
			again++
		case e.acked:
			acked[k] = n
		}
	}
	for _, k := range keys {
		if acked[k] != perKey {
			t.Errorf("key %s: acknowledged up to %d, want %d", k, acked[k], perKey)
		}
	}
	// The test is only worth something if the crash undid marks.
	if again == 0 {
		t.Fatalf("no message was published twice: the crash undid none of the %d marks (the window was not exercised)", markedBefore)
	}
	t.Logf("%d marked before the crash; %d acknowledgements were of messages acknowledged before", markedBefore, again)
}

// holdWALWriter stops the cluster's WAL writer process (SIGSTOP) and
// returns a func that kills it (SIGKILL), which the test's cleanup calls
// too: a stopped process does not act on the SIGQUIT of an immediate
// shutdown, and would hold the shutdown up.
func holdWALWriter(t *testing.T, pool *pgxpool.Pool) (kill func()) {
	t.Helper()
	var pid int
	testenv.Must(t, pool.QueryRow(context.Background(),
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'").Scan(&pid), "the WAL writer's pid")
	testenv.Must(t, syscall.Kill(pid, syscall.SIGSTOP), "SIGSTOP the WAL writer (pid %d)", pid)
	var once sync.Once
	kill = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) }
	t.Cleanup(kill)
	return kill
}
