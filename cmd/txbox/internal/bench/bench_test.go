package bench

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/tests/testenv"
)

// TestRun runs the benchmarks when TXBOX_BENCH is drain, add, order, latency or all; CI
// does not (they take minutes). `txbox bench` runs the same code.
func TestRun(t *testing.T) {
	which := os.Getenv("TXBOX_BENCH")
	if which == "" {
		t.Skip("set TXBOX_BENCH=drain|add|order|latency|all to run the benchmarks")
	}
	pool, _ := testenv.Postgres(t, 16)
	cfg := Config{Pool: pool, NATS: testenv.NATS(t), Out: os.Stdout}
	ctx := context.Background()
	if which == "add" || which == "all" {
		testenv.Must(t, Add(ctx, cfg), "add bench")
	}
	if which == "drain" || which == "all" {
		testenv.Must(t, Drain(ctx, cfg), "drain bench")
	}
	if which == "order" || which == "all" {
		testenv.Must(t, Ordered(ctx, cfg), "ordered bench")
	}
	if which == "latency" || which == "all" {
		testenv.Must(t, Latency(ctx, cfg), "latency bench")
	}
}

// Scale with a subset of shapes and relay counts drains every one of them
// (a small backlog: this checks the plumbing, not the figures), and names
// a bad shape or relay count before it touches the database.
func TestScaleSubset(t *testing.T) {
	pool, _ := testenv.Postgres(t, 16)
	ctx := context.Background()
	var out strings.Builder
	cfg := Config{Pool: pool, Out: &out, Rows: 300, Reps: 1, Shapes: []string{"unordered", "20-keys"}, Relays: []int{1, 2}}
	testenv.Must(t, Scale(ctx, cfg), "scale")
	for _, name := range []string{"unordered, 1 relays", "unordered, 2 relays, lanes", "20 keys, 2 relays", "20 keys, 1 relays, lanes"} {
		if !strings.Contains(out.String(), "rep 1: "+name+" ") {
			t.Errorf("no measurement of %q in:\n%s", name, out.String())
		}
	}
	if strings.Contains(out.String(), "1000 keys") || strings.Contains(out.String(), "4 relays") {
		t.Errorf("measured a shape or relay count not asked for:\n%s", out.String())
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Shapes: []string{"unordered", "hot"}}, `unknown backlog shape "hot"`},
		{Config{Relays: []int{1, 17}}, "--relays 17 is out of range"},
		{Config{Relays: []int{0}}, "--relays 0 is out of range"},
	} {
		c.cfg.Pool, c.cfg.Out = pool, io.Discard
		if err := Scale(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Scale(%v, %v) = %v, want an error with %q", c.cfg.Shapes, c.cfg.Relays, err, c.want)
		}
	}
}

// Latency, shortened, measures every offered rate in both wake-up modes:
// each message committed is matched to its arrival at the broker by id
// (it once matched none, every run ending in "no message arrived"), and
// the writers' comparison is printed. The figures are not checked.
func TestLatencyPlumbing(t *testing.T) {
	pool, _ := testenv.Postgres(t, 16)
	var out strings.Builder
	cfg := Config{Pool: pool, NATS: testenv.NATS(t), Out: &out, Reps: 1, AddTime: 150 * time.Millisecond}
	testenv.Must(t, Latency(context.Background(), cfg), "latency")
	for _, want := range []string{"offered  200/s, LISTEN/NOTIFY", "offered 3000/s, polling only (1s)", "writer throughput with NOTIFY / without",
		"warm-up (300ms at this rate, not counted)", "the slowest claims' round trips"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}

// Add, Drain and Ordered, shortened, run to their summaries: `txbox bench`
// has no other check in CI (TestRun measures only when asked), and a bench
// that fails on every run (as latency did) must fail here first. The
// figures are not checked.
func TestBenchPlumbing(t *testing.T) {
	pool, _ := testenv.Postgres(t, 16)
	nc := testenv.NATS(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		run  func(context.Context, Config) error
		want []string
	}{
		{"add", Add, []string{"1 writers: hand-written", "8 writers: hand-written"}},
		{"drain", Drain, []string{"txbox relay → JetStream, batch 100, 1 relays", "raw JetStream async publish (window 4000)"}},
		{"order", Ordered, []string{"1 relays: unordered", "4 relays: unordered", "scale-out 4 vs 1 relay"}},
	} {
		var out strings.Builder
		cfg := Config{Pool: pool, NATS: nc, Out: &out, Rows: 1000, Reps: 1, AddTime: 150 * time.Millisecond}
		testenv.Must(t, c.run(ctx, cfg), "bench %s", c.name)
		for _, want := range c.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("bench %s printed no %q:\n%s", c.name, want, out.String())
			}
		}
	}
}
