package outboxsql_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
)

// recordingPool wraps a real pool and records each statement its
// transactions run and, at each commit, the synchronous_commit in force
// (read in the transaction, on the server, just before the commit).
type recordingPool struct {
	txboxdriver.Pool
	mu      sync.Mutex
	stmts   []string
	commits []string
}

func (p *recordingPool) Begin(ctx context.Context) (txboxdriver.Tx, error) {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &recordingTx{Tx: tx, p: p}, nil
}

type recordingTx struct {
	txboxdriver.Tx
	p *recordingPool
}

func (t *recordingTx) note(sql string) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	t.p.stmts = append(t.p.stmts, sql)
}

func (t *recordingTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	t.note(sql)
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *recordingTx) Query(ctx context.Context, sql string, args ...any) (txboxdriver.Rows, error) {
	t.note(sql)
	return t.Tx.Query(ctx, sql, args...)
}

func (t *recordingTx) Commit(ctx context.Context) error {
	rows, err := t.Tx.Query(ctx, "SHOW synchronous_commit")
	if err != nil {
		return err
	}
	var v string
	for rows.Next() {
		if err := rows.Scan(&v); err != nil {
			return err
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	t.p.mu.Lock()
	t.p.commits = append(t.p.commits, v)
	t.p.mu.Unlock()
	return t.Tx.Commit(ctx)
}

func (p *recordingPool) take() (stmts, commits []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stmts, commits = p.stmts, p.commits
	p.stmts, p.commits = nil, nil
	return stmts, commits
}

func pgStore(t *testing.T, conns int) (*txboxpgx.Driver, *txbox.Outbox[pgx.Tx], *recordingPool) {
	t.Helper()
	pool, _ := testenv.Postgres(t, conns)
	drv := txboxpgx.New(pool)
	migrated(t, drv)
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	return drv, ob, &recordingPool{Pool: drv.Pool()}
}

// On PostgreSQL a batch, with or without ordering keys, commits lazily
// through its mark statement alone (no separate SET LOCAL), and the delete
// of DeletePublished is lazy alike: measured on the server, inside the
// claim transaction, just before its commit.
func TestPostgresLazyCommitRidesOnTheMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete=%v", del), func(t *testing.T) {
			t.Parallel()
			_, ob, rec := pgStore(t, 2)
			st, err := outboxsql.NewStore(txboxdriver.Postgres, rec, `"txbox_outbox"`, time.Minute)
			testenv.Must(t, err, "NewStore")
			if del {
				st.DeletePublished()
			}
			for _, key := range []string{"", "k"} {
				testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "t", Key: key, Payload: []byte("x")})), "add")
				b, err := st.Claim(ctx, 10, 0)
				testenv.Must(t, err, "claim")
				if len(b.Rows) != 1 || b.Rows[0].Key != key {
					t.Fatalf("claimed %+v, want the one row of key %q", b.Rows, key)
				}
				if b.Rows[0].Headers != nil {
					t.Errorf("headers %q, want none (NULL) for an empty object", b.Rows[0].Headers)
				}
				testenv.Must(t, b.Finish(ctx, []int64{b.Rows[0].Seq}, nil, 5), "finish")
				stmts, commits := rec.take()
				if len(commits) != 1 || commits[0] != "off" {
					t.Errorf("key %q: synchronous_commit at commit %v, want [off]", key, commits)
				}
				for _, s := range stmts {
					if strings.HasPrefix(strings.TrimSpace(s), "SET LOCAL") {
						t.Errorf("key %q: a statement of its own for the lazy commit: %s", key, s)
					}
				}
				// claim_timeout, claim, mark: nothing else before the commit.
				if len(stmts) != 3 {
					t.Errorf("key %q: %d statements in the claim transaction, want 3: %q", key, len(stmts), stmts)
				}
			}
		})
	}
}

// The claim runs a generic plan on PostgreSQL: planned once per
// connection, not on every execution (custom plans), which is what a
// prepared claim with a LIMIT parameter otherwise gets.
func TestPostgresClaimIsPlannedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	drv, ob, _ := pgStore(t, 1) // one connection: its prepared statements are the ones read below
	msgs := make([]txbox.Message, 50)
	for i := range msgs {
		msgs[i] = txbox.Message{Topic: "t", Payload: []byte("x")}
	}
	testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, msgs...)), "add")
	_, err := drv.PgxPool().Exec(ctx, "ANALYZE txbox_outbox")
	testenv.Must(t, err, "analyze")
	st, err := outboxsql.NewStore(txboxdriver.Postgres, drv.Pool(), `"txbox_outbox"`, time.Minute)
	testenv.Must(t, err, "NewStore")
	const claims = 8
	for range claims {
		b, err := st.Claim(ctx, 5, 0)
		testenv.Must(t, err, "claim")
		if len(b.Rows) != 5 {
			t.Fatalf("claimed %d rows, want 5", len(b.Rows))
		}
		testenv.Must(t, b.Release(ctx), "release")
	}
	var generic, custom int64
	err = drv.PgxPool().QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '%FOR UPDATE OF o SKIP LOCKED%' AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&generic, &custom)
	testenv.Must(t, err, "read the prepared claim's plans")
	if custom != 0 || generic != claims {
		t.Errorf("the claim ran %d generic and %d custom plans, want %d generic and no custom", generic, custom, claims)
	}
}

// tripConn counts round trips: writes that follow a read (or start the
// connection's traffic).
type tripConn struct {
	net.Conn
	trips   *atomic.Int64
	writing bool
}

func (c *tripConn) Write(p []byte) (int, error) {
	if !c.writing {
		c.trips.Add(1)
		c.writing = true
	}
	return c.Conn.Write(p)
}

func (c *tripConn) Read(p []byte) (int, error) {
	c.writing = false
	return c.Conn.Read(p)
}

// Through pgx a claim is one round trip (BEGIN, the claim transaction's
// settings or lane locks, and the claim, sent at once) and so is a batch's
// end (the mark and COMMIT): with the statements prepared, a batch costs
// the relay two round trips where it took five.
func TestPostgresClaimAndMarkAreOneRoundTripEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, schema := testenv.Postgres(t, 1)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	testenv.Must(t, err, "parse config")
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 1 // one connection: its statements are prepared once
	var trips atomic.Int64
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &tripConn{Conn: c, trips: &trips}, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	testenv.Must(t, err, "pool")
	t.Cleanup(func() { testenv.ClosePool(t, pool) })
	drv := txboxpgx.New(pool)
	migrated(t, drv)
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	for _, del := range []bool{false, true} {
		store, err := outboxsql.NewStore(txboxdriver.Postgres, drv.Pool(), `"txbox_outbox"`, time.Minute)
		testenv.Must(t, err, "NewStore")
		if del {
			store.DeletePublished()
		}
		lanes, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-trips")
		testenv.Must(t, err, "NewLanes")
		claims := []struct {
			name  string
			claim func() (*outboxsql.Batch, error)
		}{
			{"claim", func() (*outboxsql.Batch, error) { return store.Claim(ctx, 2, 0) }},
			{"lanes claim", func() (*outboxsql.Batch, error) { return lanes.Claim(ctx, 2, nil) }},
		}
		for _, c := range claims {
			for round := range 2 { // the first prepares the statements
				key := "k" // without leases, a lanes claim takes rows without a key only
				if strings.HasPrefix(c.name, "lanes") {
					key = ""
				}
				testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "t", Payload: []byte("x")},
					txbox.Message{Topic: "t", Key: key, Payload: []byte("y")})), "add")
				start := trips.Load()
				b, err := c.claim()
				testenv.Must(t, err, "%s", c.name)
				claimed := trips.Load() - start
				if len(b.Rows) != 2 {
					_ = b.Release(ctx)
					t.Fatalf("%s: claimed %d rows, want 2", c.name, len(b.Rows))
				}
				start = trips.Load()
				testenv.Must(t, b.Finish(ctx, []int64{b.Rows[0].Seq, b.Rows[1].Seq}, nil, 5), "%s: finish", c.name)
				finished := trips.Load() - start
				if round == 1 && (claimed != 1 || finished != 1) {
					t.Errorf("delete=%v, %s: %d round trips to claim and %d to mark and commit, want 1 and 1", del, c.name, claimed, finished)
				}
			}
		}
	}
	var pending int64
	testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL").Scan(&pending), "count")
	if pending != 0 {
		t.Errorf("%d rows still pending: a mark did not commit", pending)
	}
	if n := pool.Stat().NewConnsCount(); n != 1 {
		t.Errorf("%d connections opened, want 1: a claim or a mark left its connection unfit for the pool", n)
	}
}
