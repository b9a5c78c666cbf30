package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// claimLog is a txbox.RelayObserver that records the size of each claim,
// and a mark: how many claims had completed when the test called mark.
type claimLog struct {
	txbox.BaseRelayObserver
	mu     sync.Mutex
	sizes  []int
	marked int
}

func (c *claimLog) Claimed(n int, _ time.Duration) {
	c.mu.Lock()
	c.sizes = append(c.sizes, n)
	c.mu.Unlock()
}

func (c *claimLog) mark() {
	c.mu.Lock()
	c.marked = len(c.sizes)
	c.mu.Unlock()
}

// since returns the sizes of the claims completed after mark.
func (c *claimLog) since() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes[c.marked:]...)
}

// SQLite: a dead relay's lease is judged by the clock at the moment the
// claim runs, not when it was sent. Here the heads of two keys are leased
// by a relay that is gone (the claim row state written directly, in the
// units a relay writes), and a writer holds SQLite's write lock from before
// the lease ends until after it, so the live relay's claim waits for the
// lock (up to busy_timeout, 10 s here and in the CLI) across the lease's
// end. The first claim that runs after the lock is released takes the
// heads: a claim that compared the lease with a time read before its wait
// found them still leased, and the keys waited one more round (a whole
// busy_timeout under a writer that holds the lock long). The printed wait
// runs from the lease's end.
func TestDeadRelaysLeaseIsJudgedWhenTheClaimRunsOnSQLite(t *testing.T) {
	t.Parallel()
	db := testenv.SQLite(t)
	f := sqlFixture(t, "sqlite", db, txboxdriver.SQLite)
	f.add(t, true, keyedRows()...)
	const lease = 2 * time.Second
	until := time.Now().Add(lease)
	if n := f.exec(t, "UPDATE txbox_outbox SET claim_token = 'dead-relay', claimed_until = ? WHERE id IN (SELECT min(id) FROM txbox_outbox GROUP BY ordering_key)", until.UnixMicro()); n != 2 {
		t.Fatalf("leased %d heads, want 2", n)
	}
	claims := &claimLog{}
	rec := &recordingPublisher{}
	r := f.newRelay(t, rec, relay.Config{PollInterval: 50 * time.Millisecond, Observer: claims})
	startRelay(t, r)
	eventually(t, "the relay's claims find the heads leased", func() bool { return len(claims.since()) >= 3 })

	// A writer takes the write lock while the lease holds and keeps it
	// past the lease's end: the relay's next claim waits for it.
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock=immediate): the write lock
	testenv.Must(t, err, "begin")
	_, err = tx.ExecContext(ctx, "UPDATE txbox_outbox SET attempts = attempts WHERE id = 0")
	testenv.Must(t, err, "write")
	for time.Now().Before(until.Add(500 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond)
	}
	claims.mark()
	testenv.Must(t, tx.Commit(), "commit")
	released := time.Now()
	eventually(t, "a claim after the lock's release", func() bool { return len(claims.since()) >= 1 })
	eventually(t, "everything delivered", func() bool { return pending(t, r) == 0 })
	checkKeyOrder(t, rec.payloads())
	after := claims.since()
	t.Logf("lease ended %s before the lock's release; claims after it: %v; all delivered %s after the lease's end",
		released.Sub(until).Round(time.Millisecond), after, time.Since(until).Round(time.Millisecond))
	if after[0] != 2 {
		t.Fatalf("the first claim after the write lock's release took %d rows, want the 2 heads whose lease had ended while it waited (claims since: %v)", after[0], after)
	}
}
