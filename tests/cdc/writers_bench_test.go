package cdc_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
)

// The writers' cost of the outbox: business transactions per second of
// eight writers, each transaction one order row, with Add of one event in
// message mode (the WAL), in table mode (a row of the outbox table), or
// without an outbox, on one private server with wal_level=logical, runs
// interleaved (none, table, message, none, …), no relay running. It prints
// figures and asserts none; it runs only with TXBOX_CDC_BENCH=1:
//
//	TXBOX_CDC_BENCH=1 go test -count=1 -run TestWriterCost -v ./cdc/
//
// TXBOX_CDC_BENCH_REPS (default 3) and TXBOX_CDC_BENCH_SECONDS (per run,
// default 5) change the sizes.
func TestWriterCost(t *testing.T) {
	benchOnly(t)
	reps, seconds := benchSize("TXBOX_CDC_BENCH_REPS", 3), benchSize("TXBOX_CDC_BENCH_SECONDS", 5)
	_, pool := logicalCluster(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE bench_orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	    customer text NOT NULL, total_cents int NOT NULL, body jsonb NOT NULL)`)
	testenv.Must(t, err, "bench_orders")
	table, err := txbox.New(txboxpgx.New(pool), txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	message, err := txbox.New(txboxpgx.New(pool), txbox.Config{MessagePrefix: prefix})
	testenv.Must(t, err, "txbox.New")
	payload := []byte(`{"order_id":123456,"customer":"c-42","items":[{"sku":"tea","qty":2}],"total_cents":1999}`)
	modes := []struct {
		name string
		ob   *txbox.Outbox[pgx.Tx] // nil: no outbox
	}{{"none", nil}, {"table", table}, {"message", message}}

	rates := map[string][]float64{}
	for rep := range reps {
		for _, m := range modes {
			_, err := pool.Exec(ctx, `TRUNCATE bench_orders, txbox_outbox; CHECKPOINT`)
			testenv.Must(t, err, "truncate")
			var n atomic.Int64
			var wg sync.WaitGroup
			until := time.Now().Add(time.Duration(seconds) * time.Second)
			began := time.Now()
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					customer := "c-" + strconv.Itoa(w)
					for time.Now().Before(until) {
						err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
							if _, err := tx.Exec(ctx, `INSERT INTO bench_orders (customer, total_cents, body) VALUES ($1, $2, $3)`, customer, 1999, payload); err != nil {
								return err
							}
							if m.ob == nil {
								return nil
							}
							_, err := m.ob.Add(ctx, tx, txbox.Message{Topic: "bench.orders", Key: customer, Payload: payload})
							return err
						})
						if err != nil {
							t.Error(err)
							return
						}
						n.Add(1)
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			rate := float64(n.Load()) / time.Since(began).Seconds()
			rates[m.name] = append(rates[m.name], rate)
			t.Logf("rep %d %-7s %d transactions in %ds: %.0f tx/s", rep+1, m.name, n.Load(), seconds, rate)
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	none, tab, msg := med(rates["none"]), med(rates["table"]), med(rates["message"])
	fmt.Printf("medians of %d reps, 8 writers: no outbox %.0f tx/s, table mode %.0f tx/s (%.2f of none), message mode %.0f tx/s (%.2f of none, %.2f of table)\n",
		reps, none, tab, tab/none, msg, msg/none, msg/tab)
}
