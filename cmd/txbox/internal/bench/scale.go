package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relayseam"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxpgx"
)

// nopPublisher acknowledges every message at once: the drain then measures
// the relay and the database alone.
type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, []txbox.Message) []error { return nil }

// scaleApp is the application_name of the relays' connections, by which
// their PostgreSQL backends are found for the CPU figures.
const scaleApp = "txbox-bench-scale"

// CheckScale checks Scale's --shapes and --relays, so that a command can
// refuse them before it prints or opens anything.
func CheckScale(cfg Config) error {
	if cfg.Scheduled < 0 {
		return fmt.Errorf("--scheduled %d: want 0 or more rows", cfg.Scheduled)
	}
	_, _, err := scaleRuns(cfg)
	return err
}

// scaleRuns returns the shapes and relay counts cfg asks Scale for.
func scaleRuns(cfg Config) ([]shape, []int, error) {
	var shapes []shape
	for _, s := range []shape{
		{"unordered", func(int) string { return "" }},
		{"1000 keys", func(i int) string { return "k" + strconv.Itoa(i%1000) }},
		{"skewed", func(i int) string {
			if i%100 == 0 {
				return "hot"
			}
			return "k" + strconv.Itoa(i%1000)
		}},
		{"20 keys", func(i int) string { return "k" + strconv.Itoa(i%20) }},
	} {
		if len(cfg.Shapes) == 0 || slices.Contains(cfg.Shapes, s.flag()) {
			shapes = append(shapes, s)
		}
	}
	for _, name := range cfg.Shapes {
		if !slices.ContainsFunc(shapes, func(s shape) bool { return s.flag() == name }) {
			return nil, nil, fmt.Errorf("--shapes: unknown backlog shape %q (want unordered, 1000-keys, skewed or 20-keys)", name)
		}
	}
	relays := cfg.Relays
	if len(relays) == 0 {
		relays = []int{1, 2, 4}
	}
	for _, n := range relays {
		if n < 1 || n > 16 {
			return nil, nil, fmt.Errorf("--relays %d is out of range (1 to 16)", n)
		}
	}
	return shapes, relays, nil
}

// shape is a backlog that Scale drains: its name, and each row's key.
type shape struct {
	name string
	key  func(i int) string
}

// flag is the shape's name as --shapes takes it.
func (s shape) flag() string { return strings.ReplaceAll(s.name, " ", "-") }

// Scale measures 1, 2 and 4 relays draining the same backlog into a no-op
// publisher, with and without lanes, for four backlogs: unordered, 1,000
// ordering keys, 1,000 keys where one hot key carries 1% of the rows, and
// 20 keys (fewer than a batch: the relay claims runs of a key). Each relay has a pool of its own (as separate processes would); the
// CPU the relays' PostgreSQL backends spent per message is read from /proc.
func Scale(ctx context.Context, cfg Config) error {
	cfg.defaults()
	cfg.postmaster = postmasterPID(ctx, cfg.Pool)
	shapes, relays, err := scaleRuns(cfg)
	if err != nil {
		return err
	}
	_, ob, err := migrated(ctx, cfg.Pool)
	if err != nil {
		return err
	}
	nr := len(relays)
	var runs []run
	var pgCPU [][]float64
	for _, s := range shapes {
		for _, lanes := range []bool{false, true} {
			for _, n := range relays {
				name := fmt.Sprintf("%s, %d relays", s.name, n)
				if lanes {
					name += ", lanes"
				}
				idx := len(runs)
				pgCPU = append(pgCPU, nil)
				var closePools func()
				runs = append(runs, run{
					name:  name,
					setup: func() error { return fillShape(ctx, cfg, ob, s.key) },
					fn: func() (float64, error) {
						rate, us, closer, err := scaleDrain(ctx, cfg, lanes, n)
						pgCPU[idx] = append(pgCPU[idx], us)
						closePools = closer
						return rate, err
					},
					teardown: func() { closePools() },
					n:        cfg.Rows,
				})
			}
		}
	}
	title := fmt.Sprintf("drain of %d queued rows into a no-op publisher, batch 100", cfg.Rows)
	if cfg.DeletePublished {
		title += ", delivered rows deleted (--delete-published)"
	}
	if cfg.Scheduled > 0 {
		title += fmt.Sprintf(", %d rows scheduled an hour ahead before them (--scheduled)", cfg.Scheduled)
	}
	med, err := interleave(cfg, runs, nil, title)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "\nratios (medians), and the relays' PostgreSQL backends' CPU per message (µs, median):\n")
	fmt.Fprintf(cfg.Out, "  %-34s %9s %9s %9s %8s\n", "", "msgs/s", fmt.Sprintf("vs %d", relays[0]), "pg µs", fmt.Sprintf("pg vs %d", relays[0]))
	for i, r := range runs {
		one := i - i%nr
		pg := median(pgCPU[i])
		fmt.Fprintf(cfg.Out, "  %-34s %9.0f %8.2fx %9.1f %7.2fx\n", r.name, med.rate[i], med.rate[i]/med.rate[one], pg, pg/median(pgCPU[one]))
	}
	if shapes[0].name == "unordered" && len(shapes) > 1 {
		fmt.Fprintf(cfg.Out, "\nkeyed vs unordered (same relays, same mode):\n")
		for i := 0; i < 2*nr; i++ {
			fmt.Fprintf(cfg.Out, "  %-34s", runs[i].name)
			for s := 1; s < len(shapes); s++ {
				fmt.Fprintf(cfg.Out, " %s %.2fx", shapes[s].name, med.rate[2*nr*s+i]/med.rate[i])
			}
			fmt.Fprintln(cfg.Out)
		}
	}
	fmt.Fprintf(cfg.Out, "\nlanes vs no lanes:\n")
	for s := range shapes {
		for j := 0; j < nr; j++ {
			a, b := 2*nr*s+j, 2*nr*s+nr+j
			fmt.Fprintf(cfg.Out, "  %-34s %.2fx (pg CPU %.2fx)\n", runs[b].name, med.rate[b]/med.rate[a], median(pgCPU[b])/median(pgCPU[a]))
		}
	}
	return resetTable(ctx, cfg.Pool)
}

// fillShape empties the outbox and queues cfg.Rows rows keyed by key.
func fillShape(ctx context.Context, cfg Config, ob *txbox.Outbox[pgx.Tx], key func(int) string) error {
	if err := resetTable(ctx, cfg.Pool); err != nil {
		return err
	}
	payload := []byte(`{"order_id":123456,"customer":"c-42","total_cents":1999}`)
	batch := make([]txbox.Message, 0, 1000)
	due := time.Now().Add(time.Hour)
	for i := 0; i < cfg.Scheduled; i++ {
		batch = append(batch, txbox.Message{Topic: "bench.scheduled", Payload: payload, DeliverAt: due})
		if len(batch) == cap(batch) || i == cfg.Scheduled-1 {
			if _, err := ob.AddNoTx(ctx, batch...); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	for i := 0; i < cfg.Rows; i++ {
		batch = append(batch, txbox.Message{Topic: "bench.scale", Key: key(i), Payload: payload})
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

// scaleDrain runs n relays, each on a pool of its own, until they have
// published cfg.Rows messages, stops them, and returns the rate, the CPU
// their PostgreSQL backends spent per message (µs; 0 where /proc does not
// say) and a function that closes their pools: the backends' CPU is gone
// from /proc once their connections close, so the caller samples it first.
func scaleDrain(ctx context.Context, cfg Config, lanes bool, n int) (_, _ float64, closer func(), err error) {
	var pools []*pgxpool.Pool
	var rs []*relay.Relay
	closer = func() {
		for _, p := range pools {
			p.Close()
		}
	}
	defer func() {
		// Stop the relays before their pools close, also when the run is
		// interrupted: a claim still running on the server would otherwise
		// go on after its client is gone, holding back the horizon.
		for _, r := range rs {
			_ = r.Stop(context.WithoutCancel(ctx))
		}
		if err != nil {
			closer()
		}
	}()
	for i := 0; i < n; i++ {
		pc := cfg.Pool.Config().Copy()
		pc.ConnConfig.RuntimeParams["application_name"] = scaleApp
		pc.MaxConns, pc.MinConns = 4, 4
		p, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return 0, 0, nil, err
		}
		pools = append(pools, p)
		rc := relay.Config{BatchSize: 100, PollInterval: 2 * time.Millisecond, DisableNotify: true}
		if cfg.DeletePublished {
			rc.Retention = relay.DeletePublished
		}
		r, err := relay.New(txboxpgx.New(p), nopPublisher{}, relaytest.With(rc, relaytest.Config{LaneLease: 2 * time.Second}))
		if err != nil {
			return 0, 0, nil, err
		}
		rs = append(rs, r)
	}
	// Open every connection before the clock starts.
	for _, p := range pools {
		for p.Stat().TotalConns() < 4 {
			if err := p.Ping(ctx); err != nil {
				return 0, 0, nil, err
			}
			time.Sleep(time.Millisecond)
		}
	}
	before, _ := backendCPU(ctx, cfg.Pool)
	start := time.Now()
	for _, r := range rs {
		if err := r.Start(ctx); err != nil {
			return 0, 0, nil, err
		}
	}
	var published int64
	for published < int64(cfg.Rows) {
		published = 0
		for _, r := range rs {
			published += relayseam.CountersOf(r).Published // not Stats: it reads the table measured
		}
		select {
		case <-ctx.Done():
			return 0, 0, nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	rate := float64(published) / time.Since(start).Seconds()
	after, ok := backendCPU(ctx, cfg.Pool)
	if !ok {
		return rate, 0, closer, nil
	}
	var secs float64
	for pid, s := range after {
		secs += s - before[pid]
	}
	return rate, secs / float64(published) * 1e6, closer, nil
}

// backendCPU returns the CPU seconds (user + system) each PostgreSQL
// backend of the relays' pools has used, by process id, from /proc.
func backendCPU(ctx context.Context, pool *pgxpool.Pool) (map[int]float64, bool) {
	rows, err := pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", scaleApp)
	if err != nil {
		return nil, false
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, false
	}
	out := map[int]float64{}
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(int(pid)), "stat"))
		if err != nil {
			return nil, false // another machine, or gone
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 > len(s) {
			return nil, false
		}
		f := strings.Fields(s[i+2:])
		if len(f) < 13 {
			return nil, false
		}
		u, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[int(pid)] = (u + st) / ticksPerSecond
	}
	return out, true
}
