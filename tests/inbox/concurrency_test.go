package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// TestConcurrentCopies delivers many copies of each message to many
// goroutines at once, with handlers that sometimes fail (and are then
// redelivered): every message's business counter must end at exactly one.
func TestConcurrentCopies(t *testing.T) {
	t.Parallel()
	onEach(t, 16, testConcurrentCopies[pgx.Tx], testConcurrentCopies[*sql.Tx])
}

func testConcurrentCopies[TTx any](t *testing.T, e *env[TTx]) {
	const (
		ids     = 50
		copies  = 8
		workers = 16
	)
	ctx := context.Background()
	ib := e.newInbox(t, inbox.Config{Hook: func(context.Context, inbox.Event) {}})

	type delivery struct {
		id string
	}
	queue := make(chan delivery, ids*copies)
	var order []delivery
	for i := range ids {
		for range copies {
			order = append(order, delivery{fmt.Sprintf("m%03d", i)})
		}
	}
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, d := range order {
		queue <- d
	}
	close(queue)

	var fresh, dup, failed, commits atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for d := range queue {
				for { // redeliver until handled or found a duplicate
					res, err := ib.Handle(ctx, src, d.id, nil, func(ctx context.Context, tx TTx) error {
						if err := e.bump(ctx, tx, d.id); err != nil {
							return err
						}
						if rand.IntN(4) == 0 {
							return errBusiness
						}
						return nil
					})
					if errors.Is(err, errBusiness) {
						failed.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("Handle %s: %v", d.id, err)
						return
					}
					if res == inbox.Fresh {
						fresh.Add(1)
						commits.Add(1)
					} else {
						dup.Add(1)
					}
					break
				}
			}
		})
	}
	wg.Wait()
	if fresh.Load() != ids || dup.Load() != ids*(copies-1) {
		t.Fatalf("fresh %d, duplicate %d; want %d, %d", fresh.Load(), dup.Load(), ids, ids*(copies-1))
	}
	if n := e.count(t, "SELECT count(*) FROM counter WHERE n <> 1"); n != 0 {
		t.Fatalf("%d messages were not applied exactly once", n)
	}
	if n := e.count(t, "SELECT count(*) FROM counter"); n != ids {
		t.Fatalf("counter rows %d, want %d", n, ids)
	}
	stats, err := ib.Stats(ctx)
	testenv.Must(t, err, "Stats")
	if len(stats) != 1 || stats[0].Processed != ids || stats[0].Pending != 0 {
		t.Fatalf("Stats = %+v", stats)
	}
	t.Logf("%d messages × %d copies: %d handler failures rolled back and redelivered", ids, copies, failed.Load())
}

// TestPostgresSecondCopyWaits pins down the PostgreSQL interleaving: the
// second copy's INSERT waits on the first copy's uncommitted receipt; if the
// first commits, the second is a duplicate; if it rolls back, the second
// runs its handler.
func TestPostgresSecondCopyWaits(t *testing.T) {
	t.Parallel()
	for _, firstCommits := range []bool{true, false} {
		t.Run(fmt.Sprintf("first commits=%v", firstCommits), func(t *testing.T) {
			t.Parallel()
			pool, _ := testenv.Postgres(t, 4)
			e := setup(t, txboxpgx.New(pool))
			ib := e.newInbox(t, inbox.Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			inFirst, releaseFirst := make(chan struct{}), make(chan struct{})
			type outcome struct {
				res inbox.Result
				err error
			}
			first := make(chan outcome, 1)
			go func() {
				res, err := ib.Handle(ctx, src, "m1", nil, func(ctx context.Context, tx pgx.Tx) error {
					if err := e.bump(ctx, tx, "first"); err != nil {
						return err
					}
					close(inFirst)
					<-releaseFirst
					if !firstCommits {
						return errBusiness
					}
					return nil
				})
				first <- outcome{res, err}
			}()
			<-inFirst

			var secondRan atomic.Bool
			second := make(chan outcome, 1)
			go func() {
				res, err := ib.Handle(ctx, src, "m1", nil, func(ctx context.Context, tx pgx.Tx) error {
					secondRan.Store(true)
					return e.bump(ctx, tx, "second")
				})
				second <- outcome{res, err}
			}()

			// Wait until the second copy's INSERT is blocked on the first's row lock.
			for {
				var waiting int
				err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, e.table).Scan(&waiting)
				testenv.Must(t, err, "pg_stat_activity")
				if waiting == 1 {
					break
				}
				select {
				case o := <-second:
					t.Fatalf("the second copy returned %v, %v while the first was uncommitted", o.res, o.err)
				case <-ctx.Done():
					t.Fatal("the second copy never waited on the first")
				case <-time.After(10 * time.Millisecond):
				}
			}
			if secondRan.Load() {
				t.Fatal("the second copy's handler ran while the first was uncommitted")
			}
			close(releaseFirst)
			o1, o2 := <-first, <-second
			if firstCommits {
				if o1.err != nil || o1.res != inbox.Fresh || o2.err != nil || o2.res != inbox.Duplicate || secondRan.Load() {
					t.Fatalf("first %v %v, second %v %v (ran %v); want fresh, duplicate (not run)", o1.res, o1.err, o2.res, o2.err, secondRan.Load())
				}
				if e.counter(t, "first") != 1 || e.counter(t, "second") != 0 {
					t.Fatal("business rows: want only the first copy's")
				}
			} else {
				if !errors.Is(o1.err, errBusiness) || o2.err != nil || o2.res != inbox.Fresh || !secondRan.Load() {
					t.Fatalf("first %v %v, second %v %v (ran %v); want failed, fresh (run)", o1.res, o1.err, o2.res, o2.err, secondRan.Load())
				}
				if e.counter(t, "first") != 0 || e.counter(t, "second") != 1 {
					t.Fatal("business rows: want only the second copy's")
				}
			}
		})
	}
}
