package outboxsql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// laneDB is one database under a lane test: its driver, its outbox table
// as NewStore takes it, and SQL of its dialect.
type laneDB struct {
	dialect txboxdriver.Dialect
	pool    txboxdriver.Pool
	table   string
	// distinctLanes counts the lanes of the keyed rows; expire ends every
	// lease.
	distinctLanes, expire string
}

func laneDBs(t *testing.T) map[string]func(t *testing.T) laneDB {
	return map[string]func(t *testing.T) laneDB{
		"postgres": func(t *testing.T) laneDB {
			pool, _ := testenv.Postgres(t, 8)
			drv := txboxpgx.New(pool)
			migrateUp(t, drv)
			return laneDB{txboxdriver.Postgres, drv.Pool(), `"txbox_outbox"`,
				"SELECT count(DISTINCT hashtext(ordering_key) & 63) FROM txbox_outbox",
				"UPDATE txbox_outbox_lanes SET expires_at = now() - interval '1 second'"}
		},
		"mysql": func(t *testing.T) laneDB {
			drv := txboxsql.New(testenv.MySQL(t), txboxdriver.MySQL)
			migrateUp(t, drv)
			return laneDB{txboxdriver.MySQL, drv.Pool(), "`txbox_outbox`",
				"SELECT COUNT(DISTINCT lane) FROM txbox_outbox",
				"UPDATE txbox_outbox_lanes SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"}
		},
	}
}

func migrateUp[TTx any](t *testing.T, drv txboxdriver.Driver[TTx]) {
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
}

// scanOne reads the one value of q into dest.
func scanOne(ctx context.Context, pool txboxdriver.Pool, q string, dest any) error {
	rows, err := pool.Query(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		return fmt.Errorf("%s: no row", q)
	}
	if err := rows.Scan(dest); err != nil {
		return err
	}
	return rows.Err()
}

// The lane fencing, step by step against PostgreSQL and MySQL: a relay
// whose leases were taken over claims nothing from those lanes (its epochs
// are stale), and the new owner's fence refuses the lanes until the old
// owner's claim transaction has ended.
func TestLaneLeaseFencing(t *testing.T) {
	t.Parallel()
	for name, open := range laneDBs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testLaneLeaseFencing(t, open(t))
		})
	}
}

func testLaneLeaseFencing(t *testing.T, db laneDB) {
	ctx := context.Background()
	rows := make([]outboxsql.Row, 200)
	for i := range rows {
		rows[i] = outboxsql.Row{ID: fmt.Sprintf("m%03d", i), Topic: "t", Key: fmt.Sprintf("k%d", i%40), Payload: []byte("x"), Headers: "{}"}
	}
	testenv.Must(t, outboxsql.NewInserter(db.dialect, db.table).Insert(ctx, db.pool, rows), "insert")
	var lanes int
	testenv.Must(t, scanOne(ctx, db.pool, db.distinctLanes, &lanes), "lanes")
	if lanes < 8 {
		t.Fatalf("40 keys fell into %d lanes; the hash does not spread", lanes)
	}

	store, err := outboxsql.NewStore(db.dialect, db.pool, db.table, time.Minute)
	testenv.Must(t, err, "store")
	a, err := outboxsql.NewLanes(store, db.table, "relay-a")
	testenv.Must(t, err, "lanes a")
	b, err := outboxsql.NewLanes(store, db.table, "relay-b")
	testenv.Must(t, err, "lanes b")

	leasesA, err := a.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire a")
	if len(leasesA) != outboxsql.NumLanes {
		t.Fatalf("a acquired %d lanes, want %d", len(leasesA), outboxsql.NumLanes)
	}
	if got, err := b.Acquire(ctx, time.Minute, outboxsql.NumLanes); err != nil || len(got) != 0 {
		t.Fatalf("b acquired %v (%v) while a's leases hold", got, err)
	}
	// A first claim sizes a's reads of each lane to the rows there are
	// (Lanes.Claim reads about one batch).
	warm, err := a.Claim(ctx, 1000, leasesA)
	testenv.Must(t, err, "claim a")
	testenv.Must(t, warm.Release(ctx), "release a")
	batchA, err := a.Claim(ctx, 1000, leasesA)
	testenv.Must(t, err, "claim a")
	// PostgreSQL: every row, each key's in order behind its head; MySQL:
	// one head per key.
	wantA, wantB := 40, 40
	if db.dialect == txboxdriver.Postgres {
		wantA, wantB = 200, 180
	}
	if len(batchA.Rows) != wantA {
		t.Fatalf("a claimed %d rows, want %d", len(batchA.Rows), wantA)
	}

	// a's heartbeat does not wait for a's own claim transaction, which
	// holds its lanes' locks (a generous bound: a renewal that waited for
	// the locks would wait for the claim's end).
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	renewed, err := a.Renew(rctx, time.Minute)
	cancel()
	if err != nil || len(renewed) != outboxsql.NumLanes {
		t.Fatalf("a renewed %v (%v) while its claim is open, want every lane", renewed, err)
	}

	// a's leases end (it stalled); b takes every lane over.
	_, err = db.pool.Exec(ctx, db.expire)
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
	// a's claim locked the lanes it read: every lane with rows (on
	// PostgreSQL maybe only those: lane_lock_active).
	free, err := b.Fence(ctx, all)
	testenv.Must(t, err, "fence")
	if len(free) > outboxsql.NumLanes-lanes {
		t.Fatalf("b's fence passed %v while a's claim transaction holds the %d lanes with rows", free, lanes)
	}
	laneOf := "hashtext(ordering_key) & 63"
	if db.dialect == txboxdriver.MySQL {
		laneOf = "lane" // the virtual column
	}
	for _, ln := range free {
		var n int
		testenv.Must(t, scanOne(ctx, db.pool, fmt.Sprintf("SELECT count(*) FROM txbox_outbox WHERE %s = %d", laneOf, ln), &n), "rows of lane %d", ln)
		if n > 0 {
			t.Fatalf("b's fence passed lane %d, which has %d rows, while a's claim transaction holds it", ln, n)
		}
	}
	if db.dialect == txboxdriver.Postgres {
		// Were b to claim without its fence (a fencing bug), the row locks
		// would stop every key of a's batch at its first row: counted,
		// never a second copy out of order.
		unfenced, err := b.Claim(ctx, 1000, leasesB)
		testenv.Must(t, err, "unfenced claim")
		if len(unfenced.Rows) != 0 || b.Conflicts() != 1 {
			t.Fatalf("b's unfenced claim beside a's batch took %d rows (conflicts %d), want none and one conflict", len(unfenced.Rows), b.Conflicts())
		}
		testenv.Must(t, unfenced.Release(ctx), "release unfenced")
	}
	// a still believes it owns the lanes: its next claim reads nothing.
	stale, err := a.Claim(ctx, 1000, leasesA)
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
	free, err = b.Fence(ctx, all)
	testenv.Must(t, err, "fence b")
	if len(free) != outboxsql.NumLanes {
		t.Fatalf("b's fence passed %d lanes after a's claim ended, want all", len(free))
	}
	warm, err = b.Claim(ctx, 1000, leasesB)
	testenv.Must(t, err, "claim b")
	testenv.Must(t, warm.Release(ctx), "release b")
	batchB, err := b.Claim(ctx, 1000, leasesB)
	testenv.Must(t, err, "claim b")
	defer func() { _ = batchB.Release(ctx) }()
	// The 20 released heads and the successors of the 20 marked ones (on
	// PostgreSQL with every row behind them).
	if len(batchB.Rows) != wantB {
		t.Fatalf("b claimed %d rows, want %d", len(batchB.Rows), wantB)
	}
	for _, r := range batchB.Rows {
		for _, s := range marked {
			if r.Seq == s {
				t.Fatalf("b claimed row %d that a marked", s)
			}
		}
	}
}
