package outboxsql_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
)

// countingPool records the statements run through it and its transactions:
// their first words, and whether they had bind parameters (through
// database/sql a statement with parameters is a prepare and an execute,
// two round trips, unless the DSN sets interpolateParams).
type countingPool struct {
	txboxdriver.Pool
	mu    sync.Mutex
	stmts []string
}

func (p *countingPool) record(q string, args []any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := strings.Fields(q)[0]
	if len(args) > 0 {
		s += fmt.Sprintf("(%d args)", len(args))
	}
	p.stmts = append(p.stmts, s)
}

func (p *countingPool) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stmts
	p.stmts = nil
	return s
}

func (p *countingPool) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	p.record(q, args)
	return p.Pool.Exec(ctx, q, args...)
}

func (p *countingPool) Query(ctx context.Context, q string, args ...any) (txboxdriver.Rows, error) {
	p.record(q, args)
	return p.Pool.Query(ctx, q, args...)
}

func (p *countingPool) Begin(ctx context.Context) (txboxdriver.Tx, error) {
	return p.BeginTx(ctx, txboxdriver.TxOptions{})
}

func (p *countingPool) BeginTx(ctx context.Context, o txboxdriver.TxOptions) (txboxdriver.Tx, error) {
	tx, err := p.Pool.(txboxdriver.TxBeginner).BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, p: p}, nil
}

type countingTx struct {
	txboxdriver.Tx
	p *countingPool
}

func (t *countingTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	t.p.record(q, args)
	return t.Tx.Exec(ctx, q, args...)
}

func (t *countingTx) Query(ctx context.Context, q string, args ...any) (txboxdriver.Rows, error) {
	t.p.record(q, args)
	return t.Tx.Query(ctx, q, args...)
}

// On MySQL / MariaDB a lane claim of rows without a key runs no lane
// statement: the candidates, their locking read and the mark, without bind
// parameters (one round trip each), and it locks no fence row (a takeover
// need not wait for it). A claim with keyed rows adds the fence locks of
// their lanes and the lease check, and still takes every key's head.
func TestMySQLLaneClaimStatements(t *testing.T) {
	t.Parallel()
	db := laneDBs(t)["mysql"](t)
	ctx := context.Background()
	var rows []outboxsql.Row
	for i := range 10 {
		rows = append(rows, outboxsql.Row{ID: fmt.Sprintf("u%02d", i), Topic: "t", Payload: []byte("x"), Headers: "{}"})
	}
	testenv.Must(t, outboxsql.NewInserter(db.dialect, db.table).Insert(ctx, db.pool, rows), "insert")
	pool := &countingPool{Pool: db.pool}
	store, err := outboxsql.NewStore(db.dialect, pool, db.table, time.Minute)
	testenv.Must(t, err, "store")
	a, err := outboxsql.NewLanes(store, db.table, "relay-a")
	testenv.Must(t, err, "lanes a")
	b, err := outboxsql.NewLanes(store, db.table, "relay-b")
	testenv.Must(t, err, "lanes b")
	leases, err := a.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire")
	all := make([]int16, outboxsql.NumLanes)
	for i := range all {
		all[i] = int16(i)
	}
	pool.take()

	batch, err := a.Claim(ctx, 5, leases)
	testenv.Must(t, err, "claim")
	if len(batch.Rows) != 5 {
		t.Fatalf("claimed %d rows, want 5", len(batch.Rows))
	}
	stmts := pool.take()
	// Another relay's fence passes every lane: the batch holds none.
	free, err := b.Fence(ctx, all)
	testenv.Must(t, err, "fence")
	if len(free) != outboxsql.NumLanes {
		t.Fatalf("a fence beside a batch without keys passed %d lanes, want all %d", len(free), outboxsql.NumLanes)
	}
	pool.take() // the fence's statements
	var seqs []int64
	for _, r := range batch.Rows {
		seqs = append(seqs, r.Seq)
	}
	testenv.Must(t, batch.Finish(ctx, seqs, nil, 10), "finish")
	stmts = append(stmts, pool.take()...)
	want := []string{"SELECT", "SELECT", "UPDATE"} // candidates, claim_lanes, mark_published
	if !slices.Equal(stmts, want) {
		t.Fatalf("a batch without keys ran %v, want %v", stmts, want)
	}

	// Keyed rows: the fence locks of their lanes and the lease check come
	// in; every key's head is taken, the rest wait.
	rows = nil
	for i := range 6 {
		rows = append(rows, outboxsql.Row{ID: fmt.Sprintf("k%02d", i), Topic: "t", Key: fmt.Sprintf("key-%d", i%3), Payload: []byte("x"), Headers: "{}"})
	}
	testenv.Must(t, outboxsql.NewInserter(db.dialect, db.table).Insert(ctx, db.pool, rows), "insert keyed")
	pool.take()
	batch, err = a.Claim(ctx, 100, leases)
	testenv.Must(t, err, "claim keyed")
	got := map[string]bool{}
	for _, r := range batch.Rows {
		got[r.ID] = true
	}
	for _, id := range []string{"u05", "u06", "u07", "u08", "u09", "k00", "k01", "k02"} {
		if !got[id] {
			t.Errorf("keyed claim missed %s: took %v", id, got)
		}
	}
	if len(batch.Rows) != 8 {
		t.Fatalf("keyed claim took %d rows, want 8 (five without a key, three heads)", len(batch.Rows))
	}
	stmts = pool.take()
	free, err = b.Fence(ctx, all)
	testenv.Must(t, err, "fence keyed")
	if len(free) > outboxsql.NumLanes-1 {
		t.Fatalf("a fence beside a keyed batch passed every lane")
	}
	testenv.Must(t, batch.Release(ctx), "release keyed")
	if len(stmts) != 4 || stmts[0] != "SELECT" || stmts[1] != "SELECT" || !strings.HasPrefix(stmts[2], "SELECT(") || stmts[3] != "SELECT" {
		t.Fatalf("a batch with keys ran %v, want the candidates, the fence locks, the lease check (owner bound), the locking read", stmts)
	}
}
