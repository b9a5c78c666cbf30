package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// BenchmarkHandle compares Handle on a fresh message with the same business
// transaction written by hand with the same insert-first SQL (begin, the
// receipt INSERT … RETURNING, the business INSERT, commit), at 1 and 8
// concurrent workers, on PostgreSQL (pgx) and SQLite (database/sql). The
// duplicate cases measure redeliveries (the receipt conflicts, the handler
// does not run).
//
// The two variants are paired: every worker alternates them, on the same
// database, so that load from other processes affects both alike. Metrics:
// inbox-µs and hand-µs are each variant's mean latency, ratio is
// inbox-µs / hand-µs, msgs/s is the throughput of both together.
//
//	go test -run '^$' -bench BenchmarkHandle -benchtime 4s ./inbox/
func BenchmarkHandle(b *testing.B) {
	for _, db := range []string{"postgres", "sqlite"} {
		for _, kind := range []string{"fresh", "duplicate"} {
			for _, workers := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/workers=%d", db, kind, workers), func(b *testing.B) {
					var viaInbox, byHand func(ctx context.Context, id string) error
					if db == "postgres" {
						viaInbox, byHand = postgresOps(b)
					} else {
						viaInbox, byHand = sqliteOps(b, workers)
					}
					run(b, workers, kind == "duplicate", viaInbox, byHand)
				})
			}
		}
	}
}

func postgresOps(b *testing.B) (viaInbox, byHand func(ctx context.Context, id string) error) {
	pool, e := benchPostgres(b)
	ib := e.newInbox(b, inbox.Config{})
	viaInbox = func(ctx context.Context, id string) error {
		_, err := ib.Handle(ctx, src, id, nil, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO orders (id, amount) VALUES ($1, 1)", id)
			return err
		})
		return err
	}
	receive := `INSERT INTO "` + e.table + `" (source, message_id, received_at, processed_at, metadata)
VALUES ($1, $2, now(), now(), $3)
ON CONFLICT (source, message_id) DO NOTHING
RETURNING 1`
	byHand = func(ctx context.Context, id string) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		var one int
		err = tx.QueryRow(ctx, receive, src, id, nil).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // duplicate
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id, amount) VALUES ($1, 1)", id); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	return viaInbox, byHand
}

func sqliteOps(b *testing.B, workers int) (viaInbox, byHand func(ctx context.Context, id string) error) {
	db, e := benchSQLite(b, workers)
	ib := e.newInbox(b, inbox.Config{})
	viaInbox = func(ctx context.Context, id string) error {
		_, err := ib.Handle(ctx, src, id, nil, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (id, amount) VALUES (?1, 1)", id)
			return err
		})
		return err
	}
	receive := `INSERT INTO "` + e.table + `" (source, message_id, received_at, processed_at, metadata)
VALUES (?1, ?2, ?3, ?3, ?4)
ON CONFLICT (source, message_id) DO NOTHING
RETURNING 1`
	byHand = func(ctx context.Context, id string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		var one int
		err = tx.QueryRowContext(ctx, receive, src, id, time.Now().UnixMicro(), nil).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // duplicate
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, amount) VALUES (?1, 1)", id); err != nil {
			return err
		}
		return tx.Commit()
	}
	return viaInbox, byHand
}

func benchPostgres(b *testing.B) (*pgxpool.Pool, *env[pgx.Tx]) {
	pool, _ := testenv.Postgres(b, 16)
	e := setup(b, txboxpgx.New(pool))
	_, err := pool.Exec(context.Background(), "CREATE TABLE orders (id text PRIMARY KEY, amount integer NOT NULL)")
	testenv.Must(b, err, "create orders")
	return pool, e
}

func benchSQLite(b *testing.B, workers int) (*sql.DB, *env[*sql.Tx]) {
	db := testenv.SQLite(b)
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	e := setup(b, txboxsql.New(db, txboxdriver.SQLite))
	_, err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)")
	testenv.Must(b, err, "create orders")
	return db, e
}

// run calls viaInbox and byHand alternately, b.N times in all, from
// workers goroutines, each time with a new message id, or with one already
// handled id when dup is set.
func run(b *testing.B, workers int, dup bool, viaInbox, byHand func(ctx context.Context, id string) error) {
	ctx := context.Background()
	if dup {
		if err := viaInbox(ctx, "dup"); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var spent [2]atomic.Int64 // nanoseconds in viaInbox, in byHand
	var calls [2]atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				id := "dup"
				if !dup {
					id = "m" + strconv.FormatInt(i, 10)
				}
				v, op := int(i%2), viaInbox
				if v == 1 {
					op = byHand
				}
				start := time.Now()
				if err := op(ctx, id); err != nil {
					b.Error(err)
					return
				}
				spent[v].Add(int64(time.Since(start)))
				calls[v].Add(1)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if calls[0].Load() == 0 || calls[1].Load() == 0 {
		return
	}
	in := float64(spent[0].Load()) / float64(calls[0].Load()) / 1e3
	hand := float64(spent[1].Load()) / float64(calls[1].Load()) / 1e3
	b.ReportMetric(in, "inbox-µs")
	b.ReportMetric(hand, "hand-µs")
	b.ReportMetric(in/hand, "ratio")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
