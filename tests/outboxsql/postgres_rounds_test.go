package outboxsql_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// recordingPool wraps a real pool and records each statement its
// transactions run and, at each commit, the synchronous_commit in force
// (read in the transaction, on the server, just before the commit).
type recordingPool struct {
	driver.Pool
	mu      sync.Mutex
	stmts   []string
	commits []string
}

func (p *recordingPool) Begin(ctx context.Context) (driver.Tx, error) {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &recordingTx{Tx: tx, p: p}, nil
}

type recordingTx struct {
	driver.Tx
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

func (t *recordingTx) Query(ctx context.Context, sql string, args ...any) (driver.Rows, error) {
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
			st, err := outboxsql.NewStore(driver.Postgres, rec, `"txbox_outbox"`, time.Minute)
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
	st, err := outboxsql.NewStore(driver.Postgres, drv.Pool(), `"txbox_outbox"`, time.Minute)
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
