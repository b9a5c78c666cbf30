package txboxotel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/txboxotel"
)

func setup(t *testing.T, cfg txboxotel.Config) (*txboxotel.Tracing, *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg.TracerProvider = tp
	return txboxotel.New(cfg), exp, tp.Tracer("test")
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	got := attrs(s)
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

// addedIn returns a message whose headers hold the context of a span
// started with tr, as Outbox.Add stores it with Propagate.
func addedIn(t *testing.T, tg *txboxotel.Tracing, tr trace.Tracer, id, topic string) (txbox.Message, trace.SpanContext) {
	ctx, span := tr.Start(context.Background(), "add")
	defer span.End()
	h := map[string]string{}
	tg.Propagate(ctx, h)
	if h["traceparent"] == "" {
		t.Fatalf("Propagate wrote no traceparent: %v", h)
	}
	return txbox.Message{ID: id, Topic: topic, Payload: []byte("xyz"), Headers: h}, span.SpanContext()
}

func TestPublishSpan(t *testing.T) {
	tg, exp, tr := setup(t, txboxotel.Config{System: txboxotel.SystemNATS})
	m1, sc1 := addedIn(t, tg, tr, "id-1", "orders")
	m2, sc2 := addedIn(t, tg, tr, "id-2", "orders")
	bare := txbox.Message{ID: "id-3", Topic: "orders"}
	exp.Reset()

	// Even under a span, the publish starts a trace of its own.
	parent, ps := tr.Start(context.Background(), "relay round")
	_, end := tg.Relay().StartPublish(parent, []txbox.Message{m1, m2, bare})
	end([]error{nil, errors.New("nats: timeout"), nil})
	ps.End()

	var pub tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "publish orders" {
			pub = s
		}
	}
	if pub.Name == "" {
		t.Fatalf("no span named %q in %v", "publish orders", exp.GetSpans().Snapshots())
	}
	if pub.SpanKind != trace.SpanKindProducer {
		t.Errorf("kind %v, want producer", pub.SpanKind)
	}
	if pub.Parent.IsValid() {
		t.Errorf("the publish span has parent %v, want a new root", pub.Parent)
	}
	wantAttrs(t, pub, map[string]any{
		"messaging.system":              "nats",
		"messaging.destination.name":    "orders",
		"messaging.operation.name":      "publish",
		"messaging.operation.type":      "send",
		"messaging.batch.message_count": int64(3),
		"txbox.failed":                  int64(1),
		"error.type":                    "_OTHER",
	})
	if pub.Status.Code != codes.Error {
		t.Errorf("status %v, want error (one message unacknowledged)", pub.Status)
	}
	if len(pub.Links) != 2 {
		t.Fatalf("%d links, want 2 (the bare message has no context)", len(pub.Links))
	}
	for i, want := range []trace.SpanContext{sc1, sc2} {
		l := pub.Links[i]
		if l.SpanContext.TraceID() != want.TraceID() || l.SpanContext.SpanID() != want.SpanID() {
			t.Errorf("link %d to %v, want the add span %v", i, l.SpanContext, want)
		}
		id := ""
		for _, kv := range l.Attributes {
			if kv.Key == "messaging.message.id" {
				id = kv.Value.AsString()
			}
		}
		if wantID := []string{"id-1", "id-2"}[i]; id != wantID {
			t.Errorf("link %d has messaging.message.id %q, want %q", i, id, wantID)
		}
	}

	// One message: its id and size; topics that differ: no destination.
	exp.Reset()
	_, end = tg.Relay().StartPublish(context.Background(), []txbox.Message{m1})
	end(nil)
	_, end = tg.Relay().StartPublish(context.Background(), []txbox.Message{m1, {ID: "x", Topic: "other"}})
	end(nil)
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	wantAttrs(t, spans[0], map[string]any{"messaging.message.id": "id-1", "messaging.message.body.size": int64(3)})
	if spans[0].Name != "publish orders" || spans[0].Status.Code == codes.Error {
		t.Errorf("single: name %q status %v", spans[0].Name, spans[0].Status)
	}
	if spans[1].Name != "publish" {
		t.Errorf("mixed topics: name %q, want publish", spans[1].Name)
	}
	if _, ok := attrs(spans[1])["messaging.destination.name"]; ok {
		t.Errorf("mixed topics: has a destination")
	}
}

func TestProcessSpan(t *testing.T) {
	for _, asChild := range []bool{false, true} {
		tg, exp, tr := setup(t, txboxotel.Config{System: txboxotel.SystemRabbitMQ, ProcessAsChild: asChild})
		m, sc := addedIn(t, tg, tr, "id-1", "orders")
		// A broker or a foreign producer may spell it Traceparent.
		m.Headers = map[string]string{"Traceparent": m.Headers["traceparent"]}
		exp.Reset()
		ctx, end := tg.Consumer().StartProcess(context.Background(), "billing", txbox.Received{Message: m, Deliveries: 2})
		if !trace.SpanContextFromContext(ctx).IsValid() {
			t.Fatalf("the handler's context holds no span")
		}
		end(txbox.HandleFresh, nil)
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%d spans, want 1", len(spans))
		}
		s := spans[0]
		if s.Name != "process orders" || s.SpanKind != trace.SpanKindConsumer {
			t.Errorf("span %q kind %v, want process orders, consumer", s.Name, s.SpanKind)
		}
		wantAttrs(t, s, map[string]any{
			"messaging.system":           "rabbitmq",
			"messaging.destination.name": "orders",
			"messaging.message.id":       "id-1",
			"messaging.operation.name":   "process",
			"messaging.operation.type":   "process",
			"txbox.handler":              "billing",
			"txbox.deliveries":           int64(2),
			"txbox.result":               "fresh",
		})
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != sc.SpanID() {
			t.Errorf("links %v, want one to the add span %v", s.Links, sc)
		}
		isChild := s.Parent.SpanID() == sc.SpanID() && s.SpanContext.TraceID() == sc.TraceID()
		if isChild != asChild {
			t.Errorf("ProcessAsChild %v: parent %v (add span %v)", asChild, s.Parent, sc)
		}
		if !asChild && s.Parent.IsValid() {
			t.Errorf("not a child: parent %v, want a new root", s.Parent)
		}
	}
}

func TestProcessSpanFailure(t *testing.T) {
	tg, exp, _ := setup(t, txboxotel.Config{})
	_, end := tg.Consumer().StartProcess(context.Background(), "h", txbox.Received{Message: txbox.Message{ID: "1", Topic: "t"}, Deliveries: 1})
	end(txbox.HandleFailed, errors.New("boom"))
	s := exp.GetSpans()[0]
	if s.Status.Code != codes.Error || s.Status.Description != "boom" {
		t.Errorf("status %v, want error boom", s.Status)
	}
	if len(s.Links) != 0 {
		t.Errorf("links %v for a message without context", s.Links)
	}
	wantAttrs(t, s, map[string]any{"messaging.system": "txbox", "txbox.result": "failed", "error.type": "*errors.errorString"})
}

// Propagate's output passes Outbox.Add's header rules, and SpanContext
// reads it back.
func TestPropagateRoundTrip(t *testing.T) {
	tg, _, tr := setup(t, txboxotel.Config{})
	m, sc := addedIn(t, tg, tr, "id", "t")
	if err := m.Validate(0); err != nil {
		t.Fatalf("the propagated headers break the message contract: %v", err)
	}
	if got := tg.SpanContext(m.Headers); !got.Equal(sc.WithRemote(true)) {
		t.Errorf("SpanContext %v, want %v", got, sc)
	}
	h := map[string]string{}
	tg.Propagate(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("no span: Propagate wrote %v", h)
	}
}
