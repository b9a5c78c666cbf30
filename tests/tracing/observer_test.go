package tracing_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxotel"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// An Observer that also implements the tracer interfaces is the tracer of
// a relay and a consumer with no Tracer; AddNoTx propagates as Add does.
// SQLite and the in-memory broker.
func TestTracerFromObserver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracing := txboxotel.New(txboxotel.Config{TracerProvider: tp})

	drv := txboxsql.New(testenv.SQLite(t), txboxdriver.SQLite)
	mg, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{consumer.DefaultInboxTable}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = mg.Up(ctx)
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{Propagate: tracing.Propagate})
	testenv.Must(t, err, "txbox.New")

	addCtx, add := tp.Tracer("t").Start(ctx, "add")
	_, err = ob.AddNoTx(addCtx, txbox.Message{Topic: "ev.a", Payload: []byte("1")})
	testenv.Must(t, err, "AddNoTx")
	add.End()

	b := txboxtest.NewBroker(txboxtest.BrokerConfig{})
	b.Bind("q", "other.>") // Deliver hands the message over below
	r, err := relay.New(ob, b, relay.Config{Observer: relayObs{RelayTracer: tracing.Relay()}})
	testenv.Must(t, err, "relay.New")
	if n := txboxtest.DrainRelay(ctx, t, r, nil); n != 1 {
		t.Fatalf("drained %d, want 1", n)
	}
	msgs := b.Published("ev.a")
	if len(msgs) != 1 || msgs[0].Headers["traceparent"] == "" {
		t.Fatalf("published %v, want one message with a traceparent", msgs)
	}

	c, err := consumer.New[*sql.Tx](drv, consumer.Config{Broker: b, Observer: consumerObs{ConsumerTracer: tracing.Consumer()}})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "h", Binding: "q"},
		func(context.Context, *sql.Tx, consumer.Message) error { return nil }), "register")
	if res := txboxtest.Deliver(ctx, t, b, c, "q", msgs[0], nil); res.Outcome != txboxtest.Acked {
		t.Fatalf("outcome %v, want acked", res.Outcome)
	}
	publish := waitSpan(t, ctx, exp, "publish ev.a")
	process := waitSpan(t, ctx, exp, "process ev.a")
	requireLink(t, publish, add.SpanContext())
	requireLink(t, process, add.SpanContext())
	wantAttrs(t, process, map[string]any{"messaging.system": "txbox", "txbox.result": "fresh"})
}

type relayObs struct {
	txbox.BaseRelayObserver
	txbox.RelayTracer
}

type consumerObs struct {
	txbox.BaseConsumerObserver
	txbox.ConsumerTracer
}
