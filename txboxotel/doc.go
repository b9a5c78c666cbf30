// Package txboxotel traces txbox with OpenTelemetry, following the
// messaging semantic conventions, through the core's seams (the core
// imports no OpenTelemetry):
//
//   - Propagate, set as txbox.Config.Propagate: Outbox.Add stores the W3C
//     trace context (traceparent, tracestate) of its ctx with each row, as
//     message headers that every broker adapter carries to the consumer;
//   - Relay, set as relay.Config.Tracer: one PRODUCER span per batch,
//     "publish TOPIC", linked to each message's stored context (the relay
//     publishes long after the commit, in a trace of its own);
//   - Consumer, set as consumer.Config.Tracer: one CONSUMER span per
//     delivery, "process TOPIC", linked to the message's stored context
//     and, with Config.ProcessAsChild, its child. The handler runs in the
//     span's context.
//
// See docs/guide/operations.md for the span names, attributes and the
// messaging.system values.
package txboxotel
