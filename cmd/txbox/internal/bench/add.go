package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// Add measures a business transaction that writes an order and adds its
// event with Outbox.Add, against the same transaction with a hand-written
// INSERT of the same outbox row, at 1 and 8 concurrent writers.
func Add(ctx context.Context, cfg Config) error {
	cfg.defaults()
	drv := txboxpgx.New(cfg.Pool)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	if _, err := cfg.Pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_orders (
		id bigserial PRIMARY KEY, customer text NOT NULL, amount_cents int NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	ob, err := txbox.New(drv, txbox.Config{})
	if err != nil {
		return err
	}
	payload := []byte(`{"order_id":123456,"customer":"c-42","items":[{"sku":"tea","qty":2}],"total_cents":1999,"currency":"EUR"}`)
	// Each order is for one of 100,000 customers, whose id is the event's
	// ordering key: same-key transactions serialise (see docs/guide/ordering.md),
	// which a shop with many customers rarely meets.
	customer := func() string { return "c-" + strconv.Itoa(rand.IntN(100_000)) }
	order := func(ctx context.Context, tx pgx.Tx, c string) error {
		_, err := tx.Exec(ctx, "INSERT INTO bench_orders (customer, amount_cents) VALUES ($1, $2)", c, 1999)
		return err
	}
	withAdd := func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, cfg.Pool, func(tx pgx.Tx) error {
			c := customer()
			if err := order(ctx, tx, c); err != nil {
				return err
			}
			_, err := ob.Add(ctx, tx, txbox.Message{Topic: "order.placed", Key: c, Payload: payload})
			return err
		})
	}
	byHand := func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, cfg.Pool, func(tx pgx.Tx) error {
			c := customer()
			if err := order(ctx, tx, c); err != nil {
				return err
			}
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, headers) VALUES ($1, $2, $3, $4, $5)",
				id.String(), "order.placed", c, payload, "{}")
			return err
		})
	}
	type shape struct {
		name    string
		writers int
		fn      func(context.Context) error
	}
	var shapes []shape
	for _, w := range []int{1, 8} {
		shapes = append(shapes,
			shape{fmt.Sprintf("hand-written INSERT, %d writers", w), w, byHand},
			shape{fmt.Sprintf("txbox Add, %d writers", w), w, withAdd})
	}
	results := make([][]float64, len(shapes))
	for rep := 0; rep < cfg.Reps; rep++ {
		for i, s := range shapes {
			if _, err := cfg.Pool.Exec(ctx, "TRUNCATE txbox_outbox, bench_orders"); err != nil {
				return err
			}
			rate, err := measure(ctx, s.writers, cfg.AddTime, s.fn)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			results[i] = append(results[i], rate)
			fmt.Fprintf(cfg.Out, "  rep %d: %-40s %8.0f tx/s\n", rep+1, s.name, rate)
		}
	}
	fmt.Fprintf(cfg.Out, "\nbusiness tx + event, median of %d interleaved reps of %s:\n", cfg.Reps, cfg.AddTime)
	for i := 0; i < len(shapes); i += 2 {
		hand, add := median(results[i]), median(results[i+1])
		// Per-repetition ratios of back-to-back runs cancel slow drift.
		var paired []float64
		for r := range results[i] {
			paired = append(paired, results[i][r]/results[i+1][r])
		}
		fmt.Fprintf(cfg.Out, "  %d writers: hand-written %8.0f tx/s, txbox Add %8.0f tx/s, cost ratio %.2fx (paired median %.2fx)\n",
			shapes[i].writers, hand, add, hand/add, median(paired))
	}
	_, err = cfg.Pool.Exec(ctx, "TRUNCATE txbox_outbox; DROP TABLE bench_orders")
	return err
}

// measure runs fn from writers goroutines for d and returns calls per second.
func measure(ctx context.Context, writers int, d time.Duration, fn func(context.Context) error) (float64, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := fn(ctx); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}
