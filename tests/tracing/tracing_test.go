// Package tracing_test follows one message from Outbox.Add through a real
// relay, NATS JetStream (the shared server) and a consumer's inbox handler
// on PostgreSQL, with txboxotel's tracing and an in-memory span exporter.
package tracing_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxotel"
	"github.com/txbox/txbox/txboxpgx"
)

func TestTraceFromAddToInboxHandler(t *testing.T) {
	t.Parallel()
	for _, asChild := range []bool{false, true} {
		name := "linked"
		if asChild {
			name = "child"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			traceOneMessage(t, asChild)
		})
	}
}

func traceOneMessage(t *testing.T, asChild bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracing := txboxotel.New(txboxotel.Config{TracerProvider: tp, System: txboxotel.SystemNATS, ProcessAsChild: asChild})

	// PostgreSQL: an outbox and an inbox in a schema of the test's own.
	pool, _ := testenv.Postgres(t, 8)
	drv := txboxpgx.New(pool)
	mg, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{consumer.DefaultInboxTable}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = mg.Up(ctx)
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{Propagate: tracing.Propagate})
	testenv.Must(t, err, "txbox.New")

	// NATS JetStream: the shared server, a stream and a durable of the test's own.
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	stream := testenv.Name("TRACE")
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), stream)
		_ = js.DeleteStream(context.Background(), stream+"_DLQ")
	})
	_, err = natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream, Subjects: []string{prefix + "orders.>"}})
	testenv.Must(t, err, "stream")
	_, err = natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: stream + "_DLQ", Subjects: []string{prefix + "dlq.>"}})
	testenv.Must(t, err, "dlq stream")
	_, err = natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: "billing"})
	testenv.Must(t, err, "durable")
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
	testenv.Must(t, err, "subscriber")

	// The consumer's inbox handler notes the headers it got and the span
	// its context holds.
	type seen struct {
		headers map[string]string
		span    trace.SpanContext
	}
	handled := make(chan seen, 1)
	c, err := consumer.New[pgx.Tx](drv, consumer.Config{Broker: sub, Tracer: tracing.Consumer()})
	testenv.Must(t, err, "consumer.New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "billing", Binding: natsjs.Binding(stream, "billing")},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			handled <- seen{msg.Headers, trace.SpanContextFromContext(ctx)}
			return nil
		}), "register")
	testenv.Must(t, c.Start(ctx), "consumer start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	// The producer: Add inside a request's span, no trace header by hand.
	topic := prefix + "orders.created"
	tr := tp.Tracer("producer")
	reqCtx, req := tr.Start(ctx, "POST /orders")
	addCtx, add := tr.Start(reqCtx, "create order")
	tx, err := pool.Begin(addCtx)
	testenv.Must(t, err, "begin")
	ids, err := ob.Add(addCtx, tx, txbox.Message{Topic: topic, Payload: []byte(`{"order":1}`), Headers: map[string]string{"X-Tenant": "t1"}})
	testenv.Must(t, err, "add")
	testenv.Must(t, tx.Commit(addCtx), "commit")
	add.End()
	req.End()
	addSC := add.SpanContext()
	id := ids[0]

	// The row holds the traceparent of the Add span, beside the caller's header.
	var raw []byte
	testenv.Must(t, pool.QueryRow(ctx, `SELECT headers FROM txbox_outbox WHERE message_id = $1`, id).Scan(&raw), "read row")
	var stored map[string]string
	testenv.Must(t, json.Unmarshal(raw, &stored), "row headers %s", raw)
	wantTP := "00-" + addSC.TraceID().String() + "-" + addSC.SpanID().String() + "-01"
	if stored["traceparent"] != wantTP || stored["X-Tenant"] != "t1" {
		t.Fatalf("row headers %v, want traceparent %s and X-Tenant t1", stored, wantTP)
	}

	// The relay publishes it (after the commit, in a round of its own).
	r, err := relay.New(ob, pub, relay.Config{Tracer: tracing.Relay(), PollInterval: 20 * time.Millisecond})
	testenv.Must(t, err, "relay.New")
	testenv.Must(t, r.Start(ctx), "relay start")
	t.Cleanup(func() { _ = r.Stop(context.Background()) })

	var got seen
	select {
	case got = <-handled:
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	// The broker carried the traceparent unchanged to the handler.
	if got.headers["traceparent"] != wantTP {
		t.Errorf("the handler got headers %v, want traceparent %s", got.headers, wantTP)
	}

	publish := waitSpan(t, ctx, exp, "publish "+topic)
	process := waitSpan(t, ctx, exp, "process "+topic)

	// The publish span: PRODUCER, a trace of its own, linked to the Add span.
	if publish.SpanKind != trace.SpanKindProducer {
		t.Errorf("publish span kind %v, want producer", publish.SpanKind)
	}
	if publish.SpanContext.TraceID() == addSC.TraceID() {
		t.Errorf("the publish span is in the producer's trace; want a trace of its own, linked")
	}
	requireLink(t, publish, addSC)
	wantAttrs(t, publish, map[string]any{
		"messaging.system":           "nats",
		"messaging.destination.name": topic,
		"messaging.operation.type":   "send",
		"messaging.message.id":       id,
	})

	// The process span: CONSUMER, linked to the Add span (and its child
	// with ProcessAsChild); the handler ran in its context.
	if process.SpanKind != trace.SpanKindConsumer {
		t.Errorf("process span kind %v, want consumer", process.SpanKind)
	}
	requireLink(t, process, addSC)
	if asChild {
		if process.Parent.SpanID() != addSC.SpanID() || process.SpanContext.TraceID() != addSC.TraceID() {
			t.Errorf("process span parent %v in trace %v, want the Add span %v", process.Parent.SpanID(), process.SpanContext.TraceID(), addSC)
		}
	} else if process.Parent.IsValid() {
		t.Errorf("process span has parent %v, want a new trace linked to the Add span", process.Parent)
	}
	if got.span.SpanID() != process.SpanContext.SpanID() {
		t.Errorf("the handler ran in span %v, want the process span %v", got.span.SpanID(), process.SpanContext.SpanID())
	}
	wantAttrs(t, process, map[string]any{
		"messaging.system":           "nats",
		"messaging.destination.name": topic,
		"messaging.operation.type":   "process",
		"messaging.message.id":       id,
		"txbox.handler":              "billing",
		"txbox.result":               "fresh",
	})
}

// waitSpan waits for the ended span named name.
func waitSpan(t *testing.T, ctx context.Context, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	for {
		var names []string
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				return s
			}
			names = append(names, s.Name)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no span %q; spans: %s", name, strings.Join(names, ", "))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func requireLink(t *testing.T, s tracetest.SpanStub, to trace.SpanContext) {
	t.Helper()
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == to.TraceID() && l.SpanContext.SpanID() == to.SpanID() {
			return
		}
	}
	t.Errorf("span %q has links %v, none to the Add span %v", s.Name, s.Links, to)
}

func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		got[kv.Key] = kv.Value
	}
	for k, w := range want {
		v, ok := got[attribute.Key(k)]
		switch {
		case !ok:
			t.Errorf("span %q has no %s", s.Name, k)
		case v.AsInterface() != w:
			t.Errorf("span %q: %s = %v, want %v", s.Name, k, v.AsInterface(), w)
		}
	}
}
