package bench

import (
	"context"
	"os"
	"testing"

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
