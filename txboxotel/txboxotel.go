package txboxotel

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
)

// ScopeName is the instrumentation scope of txboxotel's tracer.
const ScopeName = "github.com/txbox/txbox/txboxotel"

// Values of Config.System. The messaging semantic conventions name Kafka
// and RabbitMQ; for NATS, Redis and asynq they have no value, and these are
// txbox's own.
const (
	SystemKafka    = "kafka"    // the conventions' value
	SystemRabbitMQ = "rabbitmq" // the conventions' value
	SystemNATS     = "nats"     // custom: no value in the conventions
	SystemRedis    = "redis"    // custom (Redis Streams)
	SystemAsynq    = "asynq"    // custom (asynq tasks on Redis)
	SystemTxbox    = "txbox"    // custom: the default, when the broker is not said
)

// Attributes of txbox's own, beside the conventions' messaging.* ones.
const (
	AttrHandler    = attribute.Key("txbox.handler")    // process: the consumer handler's name
	AttrResult     = attribute.Key("txbox.result")     // process: fresh, duplicate, failed, dead_lettered, released
	AttrDeliveries = attribute.Key("txbox.deliveries") // process: the delivery's count, 1 the first time
	AttrFailed     = attribute.Key("txbox.failed")     // publish: messages of the batch not acknowledged
)

// Config configures a Tracing.
type Config struct {
	// TracerProvider makes the tracer. Default: otel.GetTracerProvider(),
	// read when New is called.
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into the outbox row's headers
	// (Propagate) and reads it back from them (relay and consumer).
	// Default: propagation.TraceContext{}, the W3C traceparent and
	// tracestate headers only; pass otel.GetTextMapPropagator() (or a
	// composite with propagation.Baggage{}) to carry more.
	Propagator propagation.TextMapPropagator
	// System is the value of messaging.system: the broker, one of the
	// System constants (or your own). Default: SystemTxbox ("txbox").
	System string
	// ProcessAsChild makes each consumer process span a child of the
	// message's context, the span that added it to the outbox, as well as
	// linked to it, so that one trace runs from the producer's request to
	// the handler. Default: false, a new trace linked to the message's
	// (the messaging conventions' default: the handler runs long after the
	// producer's trace, and a busy topic would otherwise hang every
	// handler's work under producers' traces).
	ProcessAsChild bool
}

// Tracing traces txbox with OpenTelemetry: Propagate for the Outbox, and
// the relay's and consumer's tracers. It is safe for concurrent use.
type Tracing struct {
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	system  attribute.KeyValue
	asChild bool
}

// New returns a Tracing configured by cfg.
func New(cfg Config) *Tracing {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	sys := cfg.System
	if sys == "" {
		sys = SystemTxbox
	}
	return &Tracing{
		tracer:  tp.Tracer(ScopeName),
		prop:    prop,
		system:  semconv.MessagingSystemKey.String(sys),
		asChild: cfg.ProcessAsChild,
	}
}

// Propagate writes the trace context of ctx into headers: set it as
// txbox.Config.Propagate, and Outbox.Add stores the context of the span
// that adds a message with its row.
func (t *Tracing) Propagate(ctx context.Context, headers map[string]string) {
	t.prop.Inject(ctx, propagation.MapCarrier(headers))
}

// SpanContext returns the trace context stored in a message's headers (the
// span that added it to the outbox), invalid when it has none.
func (t *Tracing) SpanContext(headers map[string]string) trace.SpanContext {
	if len(headers) == 0 {
		return trace.SpanContext{}
	}
	ctx := t.prop.Extract(context.Background(), carrier(headers))
	return trace.SpanContextFromContext(ctx)
}

// carrier reads headers for a propagator, in any case: a broker or a
// foreign producer may have written Traceparent.
type carrier map[string]string

func (c carrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (c carrier) Set(key, value string) { c[key] = value }

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Relay returns the tracer to set in relay.Config.Tracer.
func (t *Tracing) Relay() txbox.RelayTracer { return relayTracer{t} }

// Consumer returns the tracer to set in consumer.Config.Tracer.
func (t *Tracing) Consumer() txbox.ConsumerTracer { return consumerTracer{t} }

var (
	_ txbox.RelayTracer    = relayTracer{}
	_ txbox.ConsumerTracer = consumerTracer{}
)

type relayTracer struct{ t *Tracing }

// StartPublish starts the span of one batch's publish: kind PRODUCER,
// named "publish TOPIC" when every message of the batch has the same topic
// (else "publish"), with a link to each message's stored context.
func (r relayTracer) StartPublish(ctx context.Context, msgs []txbox.Message) (context.Context, func([]error)) {
	t := r.t
	topic := ""
	if len(msgs) > 0 {
		topic = msgs[0].Topic
		for i := range msgs[1:] {
			if msgs[i+1].Topic != topic {
				topic = ""
				break
			}
		}
	}
	attrs := []attribute.KeyValue{
		t.system,
		semconv.MessagingOperationName("publish"),
		semconv.MessagingOperationTypeSend,
	}
	name := "publish"
	if topic != "" {
		name += " " + topic
		attrs = append(attrs, semconv.MessagingDestinationName(topic))
	}
	if len(msgs) == 1 {
		attrs = append(attrs, semconv.MessagingMessageID(msgs[0].ID), semconv.MessagingMessageBodySize(len(msgs[0].Payload)))
	} else {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(msgs)))
	}
	var links []trace.Link
	for i := range msgs {
		sc := t.SpanContext(msgs[i].Headers)
		if !sc.IsValid() {
			continue
		}
		links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
			semconv.MessagingMessageID(msgs[i].ID),
			semconv.MessagingDestinationName(msgs[i].Topic),
		}})
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
	return ctx, func(errs []error) {
		failed := 0
		var first error
		for _, err := range errs {
			if err != nil {
				if first == nil {
					first = err
				}
				failed++
			}
		}
		if failed > 0 {
			span.SetAttributes(AttrFailed.Int(failed), semconv.ErrorTypeOther)
			span.RecordError(first)
			span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages not acknowledged", failed, len(errs)))
		}
		span.End()
	}
}

type consumerTracer struct{ t *Tracing }

// StartProcess starts the span of one delivery: kind CONSUMER, named
// "process TOPIC", linked to the message's stored context (and its child
// with Config.ProcessAsChild).
func (c consumerTracer) StartProcess(ctx context.Context, handler string, msg txbox.Received) (context.Context, func(txbox.HandleResult, error)) {
	t := c.t
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			t.system,
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(msg.Topic),
			semconv.MessagingMessageID(msg.ID),
			semconv.MessagingMessageBodySize(len(msg.Payload)),
			AttrHandler.String(handler),
			AttrDeliveries.Int(msg.Deliveries),
		),
	}
	if sc := t.SpanContext(msg.Headers); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		if t.asChild {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	if !t.asChild || !trace.SpanContextFromContext(ctx).IsValid() {
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, span := t.tracer.Start(ctx, "process "+msg.Topic, opts...)
	return ctx, func(result txbox.HandleResult, err error) {
		span.SetAttributes(AttrResult.String(result.String()))
		if err != nil {
			span.RecordError(err)
			span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
		}
		switch result {
		case txbox.HandleFresh, txbox.HandleDuplicate:
		default:
			msg := result.String()
			if err != nil {
				msg = err.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
		span.End()
	}
}
