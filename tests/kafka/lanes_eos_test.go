package kafka_test

import (
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox/tests/testenv"
)

// signal sends sig to the relay, if it runs.
func (p *relayProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = syscall.Kill(p.cmd.Process.Pid, sig)
	}
}

// The window one transactional id per relay leaves (docs/guide/brokers.md,
// "Transactional ids and lanes"): relay A stops (SIGSTOP) while its commit
// is on its way to the cluster, held there; meanwhile its database claim
// ends (the claim lease), its lane leases run out (10 s), and relay B, with an id
// of its own, takes the lanes over, sends A's batch again and commits it.
// Then A's commit lands: B's id cannot fence A's, so a read_committed
// consumer sees A's batch twice (the inbox drops the copies), nothing is
// lost and each key's first copies are in order.
func TestRelayPausedAtCommitWhileItsLanesMove(t *testing.T) {
	t.Parallel()
	const batch, rows = 50, 400
	idA, idB := testenv.Name("relay_a"), testenv.Name("relay_b")
	e := newEOS(t, idA, batch, rows)
	a := e.relay
	argvB := slices.Clone(a.argv)
	argvB[slices.Index(argvB, idA)] = idB
	b := &relayProc{argv: argvB, log: filepath.Join(t.TempDir(), "relay_b.log")}
	t.Cleanup(func() {
		b.kill()
		if t.Failed() {
			t.Logf("relay B log:\n%s", b.tail())
		}
	})
	e.add(rows)

	var held atomic.Bool
	release := make(chan struct{})
	e.c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID != idA || !r.Commit || held.Load() {
			e.c.KeepControl()
			return nil, nil, false
		}
		a.signal(syscall.SIGSTOP)
		held.Store(true)
		e.c.SleepControl(func() { <-release })
		return nil, nil, false // the cluster commits A's transaction now
	})
	a.start(t)
	e.waitProgress("relay A's first commit, held", held.Load)
	pendingAtHold := e.pending()
	b.start(t)
	e.relay = b
	e.drain() // B took A's lanes and sent A's batch again
	close(release)
	a.signal(syscall.SIGCONT)
	a.kill()
	b.kill()

	recs := e.read(true, rows)
	byPartition(recs)
	l := e.check(recs)
	t.Logf("kfake, relay A paused at its commit while B took its lanes over (%d rows pending then): %s", pendingAtHold, l)
	if l.lost > 0 || len(l.orderErrs) > 0 {
		t.Fatalf("lost %d, order violations %v", l.lost, l.orderErrs)
	}
	if l.dupes == 0 {
		t.Fatalf("no duplicate: A's commit, landed after B's, was fenced or held nothing")
	}
	if l.dupes > inFlight*batch {
		t.Fatalf("%d duplicates (%s), more than A's %d batches in flight", l.dupes, strings.Join(l.dupIDs, " "), inFlight)
	}
}
