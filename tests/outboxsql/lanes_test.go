package outboxsql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/migrate"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// The lane fencing, step by step against PostgreSQL: a relay whose leases
// were taken over claims nothing from those lanes (its epochs are stale),
// and the new owner's fence refuses the lanes until the old owner's claim
// transaction has ended.
func TestLaneLeaseFencing(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 8)
	drv := txboxpgx.New(pool)
	ctx := context.Background()
	m, err := migrate.New(drv, migrate.Config{})
	testenv.Must(t, err, "migrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "migrate up")
	rows := make([]outboxsql.Row, 200)
	for i := range rows {
		rows[i] = outboxsql.Row{ID: fmt.Sprintf("m%03d", i), Topic: "t", Key: fmt.Sprintf("k%d", i%40), Payload: []byte("x"), Headers: "{}"}
	}
	testenv.Must(t, outboxsql.NewInserter(driver.Postgres, `"txbox_outbox"`).Insert(ctx, drv.Pool(), rows), "insert")
	var lanes int
	testenv.Must(t, pool.QueryRow(ctx, "SELECT count(DISTINCT hashtext(ordering_key) & 15) FROM txbox_outbox").Scan(&lanes), "lanes")
	if lanes < 8 {
		t.Fatalf("40 keys fell into %d lanes; the hash does not spread", lanes)
	}

	store, err := outboxsql.NewStore(driver.Postgres, drv.Pool(), `"txbox_outbox"`, time.Minute)
	testenv.Must(t, err, "store")
	a, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-a")
	testenv.Must(t, err, "lanes a")
	b, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-b")
	testenv.Must(t, err, "lanes b")

	leasesA, err := a.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire a")
	if len(leasesA) != outboxsql.NumLanes {
		t.Fatalf("a acquired %d lanes, want %d", len(leasesA), outboxsql.NumLanes)
	}
	if got, err := b.Acquire(ctx, time.Minute, outboxsql.NumLanes); err != nil || len(got) != 0 {
		t.Fatalf("b acquired %v (%v) while a's leases hold", got, err)
	}
	batchA, err := a.Claim(ctx, 1000, 0, leasesA)
	testenv.Must(t, err, "claim a")
	if len(batchA.Rows) != 40 { // one head per key
		t.Fatalf("a claimed %d rows, want the 40 heads", len(batchA.Rows))
	}

	// a's leases end (it stalled); b takes every lane over.
	_, err = pool.Exec(ctx, "UPDATE txbox_outbox_lanes SET expires_at = now() - interval '1 second'")
	testenv.Must(t, err, "expire")
	leasesB, err := b.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire b")
	if len(leasesB) != outboxsql.NumLanes || leasesB[0].Epoch != leasesA[0].Epoch+1 {
		t.Fatalf("b took %v over, want every lane at the next epoch", leasesB)
	}
	all := make([]int16, outboxsql.NumLanes)
	for i := range all {
		all[i] = int16(i)
	}
	if free, err := b.Fence(ctx, all); err != nil || len(free) != 0 {
		t.Fatalf("b's fence passed %v (%v) while a's claim transaction holds the lanes", free, err)
	}
	// a still believes it owns the lanes: its next claim reads nothing.
	stale, err := a.Claim(ctx, 1000, 0, leasesA)
	testenv.Must(t, err, "stale claim")
	if len(stale.Rows) != 0 {
		t.Fatalf("a claimed %d rows with taken-over leases", len(stale.Rows))
	}
	testenv.Must(t, stale.Release(ctx), "release stale")
	if got, err := a.Renew(ctx, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("a renewed %v (%v) after the takeover", got, err)
	}

	// a's batch settles: half is marked, the rest given back.
	var marked []int64
	for _, r := range batchA.Rows[:20] {
		marked = append(marked, r.Seq)
	}
	testenv.Must(t, batchA.Finish(ctx, marked, nil, 10), "finish a")
	free, err := b.Fence(ctx, all)
	testenv.Must(t, err, "fence b")
	if len(free) != outboxsql.NumLanes {
		t.Fatalf("b's fence passed %d lanes after a's claim ended, want all", len(free))
	}
	batchB, err := b.Claim(ctx, 1000, 0, leasesB)
	testenv.Must(t, err, "claim b")
	defer func() { _ = batchB.Release(ctx) }()
	// The 20 released heads and the successors of the 20 marked ones.
	if len(batchB.Rows) != 40 {
		t.Fatalf("b claimed %d rows, want 40 heads", len(batchB.Rows))
	}
	for _, r := range batchB.Rows {
		for _, s := range marked {
			if r.Seq == s {
				t.Fatalf("b claimed row %d that a marked", s)
			}
		}
	}
}
