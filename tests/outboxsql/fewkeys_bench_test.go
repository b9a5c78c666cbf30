package outboxsql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// headOnlyClaim is the PostgreSQL claim as it was before runs: heads only,
// the head probe written as NOT EXISTS.
const headOnlyClaim = `SELECT o.id FROM txbox_outbox o
WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= $2
  AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
  AND (o.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM txbox_outbox p
        WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id))
ORDER BY o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED`

// BenchmarkFewKeysDrain drains 20,000 rows of 20 keys with claims and marks
// alone (no broker), batch 100: the head-only claim as it was (at most
// 90 s), against ClaimRuns with the relay's floors. Reported: msgs/s.
//
//	cd tests && CI=true go test -run '^$' -bench FewKeysDrain -benchtime 1x -timeout 30m ./outboxsql/
func BenchmarkFewKeysDrain(b *testing.B) {
	const rows, keys, batch = 20000, 20, 100
	pool, _ := testenv.Postgres(b, 8)
	drv := txboxpgx.New(pool)
	migrated(b, drv)
	ctx := context.Background()
	fill := func() {
		_, err := pool.Exec(ctx, "TRUNCATE txbox_outbox")
		testenv.Must(b, err, "truncate")
		rs := make([]outboxsql.Row, rows)
		for i := range rs {
			rs[i] = outboxsql.Row{ID: fmt.Sprintf("m%d", i), Topic: "t", Key: fmt.Sprintf("k%d", i%keys), Payload: []byte("x"), Headers: "{}"}
		}
		ins := outboxsql.NewInserter(driver.Postgres, `"txbox_outbox"`)
		for i := 0; i < rows; i += 1000 {
			testenv.Must(b, ins.Insert(ctx, drv.Pool(), rs[i:i+1000]), "insert")
		}
		_, err = pool.Exec(ctx, "ANALYZE txbox_outbox")
		testenv.Must(b, err, "analyze")
	}
	b.Run("head-only", func(b *testing.B) {
		for range b.N {
			fill()
			n, start := 0, time.Now()
			for n < rows && time.Since(start) < 90*time.Second {
				tx, err := pool.Begin(ctx)
				testenv.Must(b, err, "begin")
				_, err = tx.Exec(ctx, "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
				testenv.Must(b, err, "plan_cache_mode")
				rows, err := tx.Query(ctx, headOnlyClaim, batch, 0)
				testenv.Must(b, err, "claim")
				var ids []int64
				for rows.Next() {
					var id int64
					testenv.Must(b, rows.Scan(&id), "scan")
					ids = append(ids, id)
				}
				rows.Close()
				_, err = tx.Exec(ctx, "UPDATE txbox_outbox SET published_at = now() WHERE id = ANY($1)", ids)
				testenv.Must(b, err, "mark")
				testenv.Must(b, tx.Commit(ctx), "commit")
				n += len(ids)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
		}
	})
	b.Run("runs", func(b *testing.B) {
		store, err := outboxsql.NewStore(driver.Postgres, drv.Pool(), `"txbox_outbox"`, time.Minute)
		testenv.Must(b, err, "store")
		for range b.N {
			fill()
			floors := map[string]int64{}
			var from int64
			n, start := 0, time.Now()
			for n < rows {
				var f outboxsql.Floors
				for k, seq := range floors {
					f.Keys, f.Seqs = append(f.Keys, k), append(f.Seqs, seq)
				}
				bt, err := store.ClaimRuns(ctx, batch, from, from, f)
				testenv.Must(b, err, "claim")
				seqs := make([]int64, len(bt.Rows))
				for i, r := range bt.Rows {
					seqs[i] = r.Seq
				}
				from = 0
				if len(bt.Rows) == batch {
					from = bt.Rows[0].Seq
				}
				testenv.Must(b, bt.Finish(ctx, seqs, nil, 10), "finish")
				for _, r := range bt.Rows {
					floors[r.Key] = r.Seq
				}
				n += len(seqs)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
		}
	})
}
