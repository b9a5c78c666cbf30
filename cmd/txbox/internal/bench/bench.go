// Package bench measures txbox against hand-written baselines on the same
// database and broker, side by side in one run, and reports ratios: the
// machine this runs on is shared and noisy, so only ratios of neighbouring
// measurements mean anything. `txbox bench` runs it.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// Config says what to measure and where.
type Config struct {
	Pool *pgxpool.Pool // PostgreSQL; its search_path holds the bench tables
	NATS *nats.Conn
	Out  io.Writer

	Rows    int           // rows queued for each drain run. Default 200,000.
	Reps    int           // interleaved repetitions; the median is reported. Default 3.
	AddTime time.Duration // how long each Add measurement runs. Default 3s.
	Shapes  []string      // the backlogs of Scale (unordered, 1000-keys, skewed, 20-keys); all when empty
	Relays  []int         // the numbers of relays of Scale; 1, 2 and 4 when empty
	// DeletePublished makes Scale's relays delete each delivered row
	// (relay.DeletePublished, txbox relay --retention 0) instead
	// of marking it.
	DeletePublished bool
	// Scheduled is how many rows Scale writes scheduled an hour ahead
	// (Message.DeliverAt) before each backlog, with lower ids than it, and
	// leaves pending: a drain steps past them.
	Scheduled int

	postmaster int // the PostgreSQL server's process id, when readable (see sampleCPU)
}

func (c *Config) defaults() {
	if c.Rows == 0 {
		c.Rows = 200_000
	}
	if c.Reps == 0 {
		c.Reps = 3
	}
	if c.AddTime == 0 {
		c.AddTime = 3 * time.Second
	}
}

// run is one measured configuration: fn returns a rate. setup, if set,
// runs before each measurement, outside it; n, if set, is the messages one
// measurement moves, and its CPU cost per message is reported too.
// teardown, if set, runs after each measurement once its CPU was sampled:
// a database connection closed before that takes its backend's CPU with it.
type run struct {
	name     string
	fn       func() (float64, error)
	setup    func() error
	teardown func()
	n        int
}

// measured are interleave's medians, per run.
type measured struct {
	rate []float64
	cpu  []cpuUse // zero where CPU was not measured
}

// interleave runs every run once per repetition, in turn (so slow drift hits
// all alike), calling before ahead of each, prints each rate and the
// medians under title, then the median CPU cost per message where /proc
// tells it, and returns the medians.
func interleave(cfg Config, runs []run, before func() error, title string) (measured, error) {
	rates := make([][]float64, len(runs))
	cpus := make([][]cpuUse, len(runs))
	for rep := 0; rep < cfg.Reps; rep++ {
		for i, r := range runs {
			if before != nil {
				if err := before(); err != nil {
					return measured{}, err
				}
			}
			if r.setup != nil {
				if err := r.setup(); err != nil {
					return measured{}, fmt.Errorf("%s: setup: %w", r.name, err)
				}
			}
			a, okA := cpuSample{}, false
			if r.n > 0 {
				a, okA = sampleCPU(cfg.postmaster)
			}
			rate, err := r.fn()
			if err != nil {
				return measured{}, fmt.Errorf("%s: %w", r.name, err)
			}
			if okA {
				if b, ok := sampleCPU(cfg.postmaster); ok {
					cpus[i] = append(cpus[i], perMessage(a, b, r.n))
				}
			}
			if r.teardown != nil {
				r.teardown()
			}
			rates[i] = append(rates[i], rate)
			fmt.Fprintf(cfg.Out, "  rep %d: %-70s %9.0f msgs/s\n", rep+1, r.name, rate)
		}
	}
	fmt.Fprintf(cfg.Out, "\n%s, median of %d interleaved reps:\n", title, cfg.Reps)
	m := measured{rate: make([]float64, len(runs)), cpu: make([]cpuUse, len(runs))}
	for i, r := range runs {
		m.rate[i] = median(rates[i])
		fmt.Fprintf(cfg.Out, "  %-70s %9.0f msgs/s\n", r.name, m.rate[i])
	}
	header := false
	for i, r := range runs {
		if len(cpus[i]) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(cfg.Out, "\nCPU per message (µs, median), by process (\"this\" is the relay or the raw client):\n  %-70s", "")
			for _, c := range cpuColumns {
				fmt.Fprintf(cfg.Out, " %8s", c)
			}
			fmt.Fprintf(cfg.Out, " %8s %8s\n", "sum", "machine")
			header = true
		}
		m.cpu[i] = medianCPU(cpus[i])
		fmt.Fprintf(cfg.Out, "  %-70s", r.name)
		for _, c := range cpuColumns {
			fmt.Fprintf(cfg.Out, " %8.1f", m.cpu[i].by[c])
		}
		// sum: the processes of the measurement alone, which a machine
		// shared with other work does not blur.
		fmt.Fprintf(cfg.Out, " %8.1f %8.1f\n", sum(m.cpu[i]), m.cpu[i].total)
	}
	return m, nil
}

// medianCPU takes the median of each column on its own.
func medianCPU(us []cpuUse) cpuUse {
	out := cpuUse{by: map[string]float64{}}
	col := make([]float64, len(us))
	for _, c := range cpuColumns {
		for i, u := range us {
			col[i] = u.by[c]
		}
		out.by[c] = median(col)
	}
	for i, u := range us {
		col[i] = u.total
	}
	out.total = median(col)
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// fill queues n rows into the outbox with multi-row inserts.
func fill(ctx context.Context, pool *pgxpool.Pool, ob *txbox.Outbox[pgx.Tx], subject string, n int) error {
	payload := []byte(`{"order_id":123456,"customer":"c-42","items":[{"sku":"tea","qty":2}],"total_cents":1999,"currency":"EUR"}`)
	batch := make([]txbox.Message, 0, 1000)
	for i := 0; i < n; i++ {
		batch = append(batch, txbox.Message{Topic: subject, Payload: payload})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := ob.AddNoTx(ctx, batch...); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	// Fresh statistics, as autovacuum would have after a while: without
	// them the planner takes the just-filled table for empty.
	_, err := pool.Exec(ctx, "ANALYZE txbox_outbox")
	return err
}

func resetTable(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "TRUNCATE txbox_outbox; VACUUM ANALYZE txbox_outbox")
	if err != nil {
		// VACUUM cannot run in a multi-statement string on every setup.
		if _, err = pool.Exec(ctx, "TRUNCATE txbox_outbox"); err == nil {
			_, err = pool.Exec(ctx, "VACUUM ANALYZE txbox_outbox")
		}
	}
	return err
}

// Drain measures relay drain rates beside the raw JetStream publish rate
// and the raw claim-and-mark rate of the same database.
func Drain(ctx context.Context, cfg Config) error {
	cfg.defaults()
	cfg.postmaster = postmasterPID(ctx, cfg.Pool)
	drv, ob, err := migrated(ctx, cfg.Pool)
	if err != nil {
		return err
	}
	js, err := jetstream.New(cfg.NATS)
	if err != nil {
		return err
	}
	streamName := fmt.Sprintf("TXBOX_BENCH_%d", time.Now().UnixNano())
	subject := "txboxbench." + strconv.FormatInt(time.Now().UnixNano(), 10)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{subject}, Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), streamName) }()
	purge := func() error {
		s, err := js.Stream(ctx, streamName)
		if err != nil {
			return err
		}
		return s.Purge(ctx)
	}

	queued := refill(ctx, cfg.Pool, ob, subject, cfg.Rows)
	runs := []run{{
		name: "raw JetStream async publish (window 4000)",
		fn:   func() (float64, error) { return rawPublish(ctx, cfg.NATS, subject, cfg.Rows, 4000, false) },
		n:    cfg.Rows,
	}}
	// The relay's messages, published raw with as many in flight as the
	// hand-written publish likes (4,000), and as a relay at batch 100 and
	// 1,000 holds (two batches: nats-server spends more per message on a
	// shallower stream).
	rawTxbox := map[int]int{} // window → run
	for _, w := range []int{4000, 200, 2000} {
		rawTxbox[w] = len(runs)
		runs = append(runs, run{
			name: fmt.Sprintf("raw JetStream async publish, txbox's headers (window %d)", w),
			fn:   func() (float64, error) { return rawPublish(ctx, cfg.NATS, subject, cfg.Rows, w, true) },
			n:    cfg.Rows,
		})
	}
	pairs := len(runs)
	for _, batch := range []int{100, 1000} {
		for _, workers := range []int{1, 4} {
			runs = append(runs, run{
				name:  fmt.Sprintf("raw claim+mark, no broker, batch %d, %d workers", batch, workers),
				fn:    func() (float64, error) { return rawClaimMark(ctx, cfg.Pool, batch, workers, cfg.Rows, false) },
				setup: queued, n: cfg.Rows,
			}, run{
				name: fmt.Sprintf("txbox relay → JetStream, batch %d, %d relays", batch, workers),
				fn: func() (float64, error) {
					rec := newRounds()
					rate, err := relayDrain(ctx, drv, cfg.NATS, batch, workers, cfg.Rows, rec)
					if err == nil && workers == 1 {
						rec.stages(cfg.Out) // printed above its rep's line
					}
					return rate, err
				},
				setup: queued, n: cfg.Rows,
			})
		}
	}
	med, err := interleave(cfg, runs, purge, fmt.Sprintf("drain of %d queued rows", cfg.Rows))
	if err != nil {
		return err
	}
	fmt.Fprintln(cfg.Out, "\nrelay as a share of min(raw publish, raw claim+mark of the same shape):")
	for i := pairs; i < len(runs); i += 2 {
		base := min(med.rate[0], med.rate[i])
		fmt.Fprintf(cfg.Out, "  %-58s %5.0f%%\n", runs[i+1].name, 100*med.rate[i+1]/base)
	}
	if med.cpu[0].by == nil {
		return resetTable(ctx, cfg.Pool)
	}
	// One relay's CPU per message (this + postgres + broker) against its
	// hand-written parts: the raw claim-and-mark of its batch, and the raw
	// publish of its messages with 4,000 in flight, or with two batches.
	fmt.Fprintln(cfg.Out, "\none relay's CPU per message (sum) against the hand-written parts (raw claim+mark + raw publish, txbox's headers):")
	for i := pairs; i < len(runs); i += 4 { // the 1-worker pairs
		batch := 100
		if i > pairs {
			batch = 1000
		}
		relay, claim := sum(med.cpu[i+1]), sum(med.cpu[i])
		deep, shallow := sum(med.cpu[rawTxbox[4000]]), sum(med.cpu[rawTxbox[2*batch]])
		fmt.Fprintf(cfg.Out, "  batch %-5d relay %5.1f µs   window 4000: %5.1f + %4.1f = %5.1f (%.2fx)   window %d: %5.1f + %4.1f = %5.1f (%.2fx)\n",
			batch, relay, claim, deep, claim+deep, relay/(claim+deep), 2*batch, claim, shallow, claim+shallow, relay/(claim+shallow))
	}
	return resetTable(ctx, cfg.Pool)
}

// refill returns a setup that empties the outbox table and queues n rows
// on topic, so that each drain starts from the same backlog.
func refill(ctx context.Context, pool *pgxpool.Pool, ob *txbox.Outbox[pgx.Tx], topic string, n int) func() error {
	return func() error {
		if err := resetTable(ctx, pool); err != nil {
			return err
		}
		return fill(ctx, pool, ob, topic, n)
	}
}

// rawPublish publishes n messages with jetstream.PublishMsgAsync, window in
// flight, each with a message id. With txboxHeaders the messages carry what
// the relay's do beyond their rows' headers (docs/reference/wire-format.md): a UUID
// message id and a Txbox-Created-At header; without, a short id only.
func rawPublish(ctx context.Context, nc *nats.Conn, subject string, n, window int, txboxHeaders bool) (float64, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window))
	if err != nil {
		return 0, err
	}
	payload := []byte(`{"order_id":123456,"customer":"c-42","items":[{"sku":"tea","qty":2}],"total_cents":1999,"currency":"EUR"}`)
	start := time.Now()
	prefix := strconv.FormatInt(start.UnixNano(), 36)
	futures := make([]jetstream.PubAckFuture, n)
	for i := range futures {
		m, id := &nats.Msg{Subject: subject, Data: payload}, prefix+strconv.Itoa(i)
		if txboxHeaders {
			id = uuid.Must(uuid.NewV7()).String()
			m.Header = nats.Header{txbox.HeaderCreatedAt: {wire.Time(time.Now())}}
		}
		f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithStallWait(time.Minute))
		if err != nil {
			return 0, err
		}
		futures[i] = f
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	elapsed := time.Since(start)
	for _, f := range futures {
		select {
		case err := <-f.Err():
			return 0, fmt.Errorf("publish failed: %w", err)
		default:
		}
	}
	return float64(n) / elapsed.Seconds(), nil
}

// rawClaimMark is the hand-written relay without a broker: the same claim
// and mark statements, nothing else.
func rawClaimMark(ctx context.Context, pool *pgxpool.Pool, batch, workers, n int, del bool) (float64, error) {
	mark := "UPDATE txbox_outbox SET published_at = now() WHERE id = ANY($1)"
	if del {
		mark = "DELETE FROM txbox_outbox WHERE id = ANY($1)"
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int64, 0, batch)
			for done.Load() < int64(n) {
				ids = ids[:0]
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					rows, err := tx.Query(ctx, `SELECT id, message_id, topic, payload, headers::text FROM txbox_outbox
						WHERE published_at IS NULL AND dead_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
					if err != nil {
						return err
					}
					for rows.Next() {
						var id int64
						var mid, topic, headers string
						var payload []byte
						if err := rows.Scan(&id, &mid, &topic, &payload, &headers); err != nil {
							return err
						}
						ids = append(ids, id)
					}
					if err := rows.Err(); err != nil {
						return err
					}
					_, err = tx.Exec(ctx, mark, ids)
					return err
				})
				if err != nil {
					errc <- err
					return
				}
				if len(ids) == 0 {
					return
				}
				done.Add(int64(len(ids)))
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

// relayDrain drains n rows with relays relays into JetStream; rec, if not
// nil, records their rounds.
func relayDrain(ctx context.Context, drv *txboxpgx.Driver, nc *nats.Conn, batch, relays, n int, rec *rounds) (float64, error) {
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	if err != nil {
		return 0, err
	}
	rc := relay.Config{BatchSize: batch}
	if rec != nil {
		rc.Tracer = rec
	}
	return drainInto(ctx, drv, pub, rc, relays, n)
}

// migrated applies the migrations to pool's default outbox table and
// returns its driver and outbox.
func migrated(ctx context.Context, pool *pgxpool.Pool) (*txboxpgx.Driver, *txbox.Outbox[pgx.Tx], error) {
	drv := txboxpgx.New(pool)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	if err != nil {
		return nil, nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, nil, err
	}
	ob, err := txbox.New(drv, txbox.Config{})
	if err != nil {
		return nil, nil, err
	}
	return drv, ob, nil
}
