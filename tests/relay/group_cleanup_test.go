package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// leftPublisher records, at each publish, how many delivered rows past
// retention the store's table still holds.
type leftPublisher struct {
	count func() int64
	mu    sync.Mutex
	left  []int64 // one per publish
}

func (p *leftPublisher) Publish(_ context.Context, ms []txbox.Message) []error {
	n := p.count()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.left = append(p.left, n)
	return nil
}

func (p *leftPublisher) published() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.left...)
}

// A store of a Group with a large cleanup to do goes on relaying
// meanwhile: the cleanup runs one statement a turn, the store's round
// after it, as a Relay of its own relays beside its cleanup. Before, the
// whole cleanup ran in one turn, and the store's new messages waited for
// all of it (hours, the first cleanup after Retention was lowered).
func TestGroupCleanupDoesNotHoldUpItsStore(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 4)
	tn := pgTenants(t, pool, testenv.Subject(), 1)[0]
	const old = 3000
	tn.exec(t, "INSERT INTO %s (topic, payload, published_at) SELECT 'done', 'p', now() - interval '2 hours' FROM generate_series(1, 3000)")
	ctx := context.Background()
	oldRows := func() int64 {
		var n int64
		testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+tn.table+" WHERE published_at < now() - interval '1 hour'").Scan(&n), "count")
		return n
	}
	pub := &leftPublisher{count: oldRows}
	g, err := relay.NewGroup(relay.GroupConfig{})
	testenv.Must(t, err, "NewGroup")
	r := tn.newRelay(t, pub, relaytest.With(relay.Config{Retention: time.Hour, PollInterval: 10 * time.Millisecond}, relaytest.Config{CleanupBatchSize: 1, CleanupInterval: time.Millisecond}))
	testenv.Must(t, g.Add(ctx, relay.Store{Name: tn.name, Relay: r}), "add")
	runGroup(t, g)

	// The waits show how many old rows are left: a slow machine that goes
	// on deleting is waited for, a cleanup that stops is not.
	left := func() string { return fmt.Sprintf("%d old rows left", oldRows()) }
	testenv.Await(t, "the cleanup has begun", func() (bool, string) { return oldRows() < old, left() })
	tn.add(t, 1)
	testenv.Await(t, "the new message is published", func() (bool, string) { return len(pub.published()) > 0, left() })
	if left := pub.published()[0]; left == 0 {
		t.Fatalf("the new message was published only once the whole cleanup (%d rows, one a statement) was done", old)
	} else {
		t.Logf("published with %d of %d rows still to clean up", left, old)
	}
	testenv.Await(t, "the cleanup is done", func() (bool, string) { n := oldRows(); return n == 0, fmt.Sprintf("%d old rows left", n) })
}
