package tracing_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxotel"
	"github.com/txbox/txbox/txboxpgx"
)

type ackAll struct{}

func (ackAll) Publish(context.Context, []txbox.Message) []error { return nil }

// What tracing costs a relay round, in allocations, side by side: off, and
// on (a span per batch, a link per message, each message's traceparent
// parsed). Off is the relay's ordinary path (one nil check). On is bounded
// per message, so that a batch's span never costs work that grows faster
// than the batch.
func TestTracingAllocationsPerRound(t *testing.T) {
	ctx := context.Background()
	const batch, runs = 100, 20
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracing := txboxotel.New(txboxotel.Config{TracerProvider: tp})
	allocs := map[bool]float64{}
	for _, on := range []bool{false, true} {
		pool, _ := testenv.Postgres(t, 4)
		drv := txboxpgx.New(pool)
		mg, err := txboxmigrate.New(drv, txboxmigrate.Config{})
		testenv.Must(t, err, "txboxmigrate.New")
		_, err = mg.Up(ctx)
		testenv.Must(t, err, "migrate up")
		ob, err := txbox.New(drv, txbox.Config{Propagate: tracing.Propagate})
		testenv.Must(t, err, "txbox.New")
		addCtx, span := tp.Tracer("t").Start(ctx, "add")
		msgs := make([]txbox.Message, batch*(runs+2))
		for i := range msgs {
			msgs[i] = txbox.Message{Topic: "cost.t", Payload: []byte("p")}
		}
		tx, err := pool.Begin(ctx)
		testenv.Must(t, err, "begin")
		testenv.Must(t, testenv.Err(ob.Add(addCtx, tx, msgs...)), "add")
		testenv.Must(t, tx.Commit(ctx), "commit")
		span.End()
		cfg := relay.Config{BatchSize: batch, DisableNotify: true}
		if on {
			cfg.Tracer = tracing.Relay()
		}
		r, err := relay.New[pgx.Tx](ob, ackAll{}, cfg)
		testenv.Must(t, err, "relay.New")
		round := func() {
			if n, err := r.Round(ctx); err != nil || n != batch {
				t.Fatalf("round: %d rows, %v", n, err)
			}
		}
		round()
		exp.Reset()
		allocs[on] = testing.AllocsPerRun(runs, round)
		if on && len(exp.GetSpans()) == 0 {
			t.Fatal("tracing on made no span")
		}
	}
	perMsg := (allocs[true] - allocs[false]) / batch
	t.Logf("allocations per round of %d: tracing off %.0f, on %.0f (%.1f more per message)", batch, allocs[false], allocs[true], perMsg)
	if perMsg > 40 {
		t.Errorf("tracing on allocates %.1f more per message, want a small bound (40)", perMsg)
	}
}
