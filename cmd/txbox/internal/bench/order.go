package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxpgx"
)

// setup migrates the bench schema and returns the driver, the outbox and a
// stream capturing subject, deleted by the returned func.
func setup(ctx context.Context, cfg Config) (*txboxpgx.Driver, *txbox.Outbox[pgx.Tx], string, func(), error) {
	drv, ob, err := migrated(ctx, cfg.Pool)
	if err != nil {
		return nil, nil, "", nil, err
	}
	js, err := jetstream.New(cfg.NATS)
	if err != nil {
		return nil, nil, "", nil, err
	}
	name := fmt.Sprintf("TXBOX_BENCH_%d", time.Now().UnixNano())
	subject := "txboxbench." + strconv.FormatInt(time.Now().UnixNano(), 10)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}}); err != nil {
		return nil, nil, "", nil, err
	}
	return drv, ob, subject, func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }, nil
}

// Ordered measures the drain rate of rows with 1000 distinct keys against
// rows without keys, with 1 and 4 relays.
func Ordered(ctx context.Context, cfg Config) error {
	cfg.defaults()
	drv, ob, subject, done, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	payload := []byte(`{"order_id":123456,"customer":"c-42","total_cents":1999}`)
	fillKeys := func(keys int) error {
		batch := make([]txbox.Message, 0, 1000)
		for i := 0; i < cfg.Rows; i++ {
			m := txbox.Message{Topic: subject, Payload: payload}
			if keys > 0 {
				m.Key = "k" + strconv.Itoa(i%keys)
			}
			batch = append(batch, m)
			if len(batch) == cap(batch) || i == cfg.Rows-1 {
				if _, err := ob.AddNoTx(ctx, batch...); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		_, err := cfg.Pool.Exec(ctx, "ANALYZE txbox_outbox")
		return err
	}
	type shape struct {
		name   string
		keys   int
		relays int
	}
	shapes := []shape{{"unordered, 1 relay", 0, 1}, {"1000 keys, 1 relay", 1000, 1}, {"unordered, 4 relays", 0, 4}, {"1000 keys, 4 relays", 1000, 4}}
	results := make([][]float64, len(shapes))
	for rep := 0; rep < cfg.Reps; rep++ {
		for i, s := range shapes {
			if err := resetTable(ctx, cfg.Pool); err != nil {
				return err
			}
			if err := fillKeys(s.keys); err != nil {
				return err
			}
			rate, err := relayDrain(ctx, drv, cfg.NATS, 100, s.relays, cfg.Rows, nil)
			if err != nil {
				return err
			}
			results[i] = append(results[i], rate)
			fmt.Fprintf(cfg.Out, "  rep %d: %-25s %8.0f msgs/s\n", rep+1, s.name, rate)
		}
	}
	fmt.Fprintf(cfg.Out, "\ndrain of %d rows, batch 100, median of %d reps:\n", cfg.Rows, cfg.Reps)
	for i := 0; i < len(shapes); i += 2 {
		u, o := median(results[i]), median(results[i+1])
		fmt.Fprintf(cfg.Out, "  %d relays: unordered %8.0f msgs/s, ordered (1000 keys) %8.0f msgs/s, ratio %.2f\n", shapes[i].relays, u, o, o/u)
	}
	fmt.Fprintf(cfg.Out, "  scale-out 4 vs 1 relay: unordered %.2fx, ordered %.2fx\n",
		median(results[2])/median(results[0]), median(results[3])/median(results[1]))
	return resetTable(ctx, cfg.Pool)
}

// Latency measures commit-to-broker latency at steady offered loads, with
// LISTEN/NOTIFY wake-ups and with polling only (default 1s interval), and
// the writers' throughput with and without the notify trigger.
func Latency(ctx context.Context, cfg Config) error {
	cfg.defaults()
	drv, ob, subject, done, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	if _, err := cfg.Pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_orders (
		id bigserial PRIMARY KEY, customer text NOT NULL, amount_cents int NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	defer func() { _, _ = cfg.Pool.Exec(context.WithoutCancel(ctx), "DROP TABLE bench_orders") }()
	for _, rate := range []int{200, 1000, 3000} {
		for _, notify := range []bool{true, false} {
			rec := newRounds()
			p50, p99, got, err := latencyRun(ctx, cfg, drv, ob, subject, rate, notify, rec)
			if err != nil {
				return err
			}
			mode := "LISTEN/NOTIFY"
			if !notify {
				mode = "polling only (1s)"
			}
			fmt.Fprintf(cfg.Out, "  offered %4d/s, %-18s achieved %5.0f/s, commit→broker p50 %7.1f ms, p99 %7.1f ms\n",
				rate, mode, got, p50, p99)
			if notify {
				rec.breakdown(cfg.Out)
			}
		}
	}

	// Writers with and without the notify trigger, interleaved.
	trig := `"txbox_outbox_notify"`
	order := func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, cfg.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO bench_orders (customer, amount_cents) VALUES ('c-42', 1999)"); err != nil {
				return err
			}
			_, err := ob.Add(ctx, tx, txbox.Message{Topic: subject, Payload: []byte(`{"order":1}`)})
			return err
		})
	}
	var with, without []float64
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, on := range []bool{true, false} {
			action := "ENABLE"
			if !on {
				action = "DISABLE"
			}
			if _, err := cfg.Pool.Exec(ctx, "ALTER TABLE txbox_outbox "+action+" TRIGGER "+trig); err != nil {
				return err
			}
			r, err := measure(ctx, 8, cfg.AddTime, order)
			if err != nil {
				return err
			}
			if on {
				with = append(with, r)
			} else {
				without = append(without, r)
			}
			fmt.Fprintf(cfg.Out, "  rep %d: 8 writers, notify trigger %-7s %7.0f tx/s\n", rep+1, action+"D", r)
		}
	}
	if _, err := cfg.Pool.Exec(ctx, "ALTER TABLE txbox_outbox ENABLE TRIGGER "+trig); err != nil {
		return err
	}
	var paired []float64
	for i := range with {
		paired = append(paired, with[i]/without[i])
	}
	fmt.Fprintf(cfg.Out, "  writer throughput with NOTIFY / without: %.2f (medians %.0f / %.0f tx/s; paired median %.2f)\n",
		median(with)/median(without), median(with), median(without), median(paired))
	return resetTable(ctx, cfg.Pool)
}

// warmUp is how long each offered rate runs before it is measured (at most
// as long as the measurement, 2 × Config.AddTime): the
// relay's first claims on each connection of the pool (the pool grows to
// what the writers and the relay's rounds hold at once) prepare and plan
// its statements there, and a new connection is opened and its backend
// reads the catalogs first. Those claims take tens of milliseconds, more
// on a loaded server, and each holds every row committed meanwhile: in a
// 4-6 s run they were most of the slowest 1% at 200 and 1,000 commits/s
// (docs/benchmarks/2026-12-08-relay-latency.md). A relay in service meets
// them when it starts and when its pool opens a connection; the warm-up's
// own p50/p99 are printed beside the measured ones.
const warmUp = time.Second

// latencyRun measures one offered rate after a warm-up at that rate (see
// warmUp, whose figures it prints); rec gets the relay's rounds and each
// message's commit and arrival after the warm-up (breakdown).
func latencyRun(ctx context.Context, cfg Config, drv *txboxpgx.Driver, ob *txbox.Outbox[pgx.Tx], subject string, rate int, notify bool, rec *rounds) (p50, p99, achieved float64, err error) {
	if err := resetTable(ctx, cfg.Pool); err != nil {
		return 0, 0, 0, err
	}
	var mu sync.Mutex
	measuring := false // rec records commits and arrivals (after the warm-up)
	committed := map[string]time.Time{}
	arrived := map[string]time.Time{} // arrived before its producer recorded the commit
	var lat []float64
	sub, err := cfg.NATS.Subscribe(subject, func(m *nats.Msg) {
		now := time.Now()
		id := m.Header.Get(jetstream.MsgIDHeader)
		mu.Lock()
		defer mu.Unlock()
		if measuring {
			rec.arrived(id, now)
		}
		if t, ok := committed[id]; ok {
			lat = append(lat, float64(now.Sub(t).Microseconds())/1000)
			delete(committed, id)
		} else {
			arrived[id] = now
		}
	})
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	pub, err := natsjs.NewPublisher(cfg.NATS, natsjs.PublisherConfig{})
	if err != nil {
		return 0, 0, 0, err
	}
	r, err := relay.New(drv, pub, relay.Config{DisableNotify: !notify, Tracer: rec})
	if err != nil {
		return 0, 0, 0, err
	}
	if err := r.Start(ctx); err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = r.Stop(context.WithoutCancel(ctx)) }()
	if notify {
		listening := func() bool { st, _ := r.Stats(ctx); return st.Listening }
		for i := 0; i < 200 && !listening(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if !listening() {
			return 0, 0, 0, fmt.Errorf("relay does not receive notifications")
		}
	}
	const producers = 8
	interval := time.Duration(float64(time.Second) * producers / float64(rate))
	// offer commits at rate for d and waits until every message committed
	// has arrived; it returns their latencies (ms, sorted) and how many
	// were committed per second.
	offer := func(d time.Duration) ([]float64, float64, error) {
		var wg sync.WaitGroup
		var sent sync.Map
		start := time.Now()
		var total int64
		var totalMu sync.Mutex
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Producers tick out of step, as independent requests do: a
				// commit every interval/producers, not eight at once.
				time.Sleep(interval * time.Duration(p) / producers)
				tick := time.NewTicker(interval)
				defer tick.Stop()
				n := int64(0)
				for time.Since(start) < d {
					<-tick.C
					msg := txbox.Message{Topic: subject, Payload: []byte(`{"order":1}`)}
					var id string
					err := pgx.BeginFunc(ctx, cfg.Pool, func(tx pgx.Tx) error {
						if _, err := tx.Exec(ctx, "INSERT INTO bench_orders (customer, amount_cents) VALUES ('c-42', 1999)"); err != nil {
							return err
						}
						ids, err := ob.Add(ctx, tx, msg)
						if err == nil {
							id = ids[0]
						}
						return err
					})
					if err != nil {
						sent.Store("err", err)
						return
					}
					now := time.Now()
					mu.Lock()
					if measuring {
						rec.committed(id, now)
					}
					if _, ok := arrived[id]; ok {
						lat = append(lat, 0) // delivered within the commit call's return
						delete(arrived, id)
					} else {
						committed[id] = now
					}
					mu.Unlock()
					n++
				}
				totalMu.Lock()
				total += n
				totalMu.Unlock()
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		if e, ok := sent.Load("err"); ok {
			return nil, 0, e.(error)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			n := len(lat)
			mu.Unlock()
			if int64(n) >= total || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		if int64(len(lat)) < total {
			// Every committed message is delivered: one missing after 30 s is
			// a failure of the relay (or of this bench), not a figure.
			return nil, 0, fmt.Errorf("%d of %d committed messages arrived within 30 s of the last commit", len(lat), total)
		}
		got := lat
		lat = nil
		slices.Sort(got)
		return got, float64(total) / elapsed.Seconds(), nil
	}
	if notify {
		// The machine's round trip meanwhile, a floor for the commit's
		// and the claim's (breakdown); from the warm-up on, so that the
		// pool holds its connection too before the measured part.
		pctx, stop := context.WithCancel(ctx)
		pinged := make(chan struct{})
		defer func() { stop(); <-pinged }()
		go func() {
			defer close(pinged)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-tick.C:
				}
				t0 := time.Now()
				if _, err := cfg.Pool.Exec(pctx, "SELECT 1"); err == nil {
					rec.ping(time.Since(t0))
				}
			}
		}()
	}
	warmFor := min(warmUp, 2*cfg.AddTime)
	warm, _, err := offer(warmFor)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("warm-up: %w", err)
	}
	if notify {
		fmt.Fprintf(cfg.Out, "      warm-up (%s at this rate, not counted): %d messages, commit→broker p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
			warmFor, len(warm), warm[len(warm)/2], warm[len(warm)*99/100], warm[len(warm)-1])
	}
	rec.reset(time.Now())
	mu.Lock()
	measuring = true
	mu.Unlock()
	got, achieved, err := offer(2 * cfg.AddTime)
	if err != nil {
		return 0, 0, 0, err
	}
	return got[len(got)/2], got[len(got)*99/100], achieved, nil
}
