package txboxotel_test

import (
	"context"
	"database/sql"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxotel"
	"github.com/txbox/txbox/txboxsql"
	"github.com/txbox/txbox/txboxtest"
)

// Wiring: the Outbox stores the trace context of Add's ctx with each row,
// the relay's publish spans link to it, and the consumer's process spans
// link to it (here also as their parent). The spans go to the global
// TracerProvider, set by the program (otel.SetTracerProvider).
func Example() {
	var db *sql.DB // your database
	tracing := txboxotel.New(txboxotel.Config{System: txboxotel.SystemNATS, ProcessAsChild: true})

	drv := txboxsql.New(db, txboxdriver.Postgres)
	outbox, err := txbox.New(drv, txbox.Config{Propagate: tracing.Propagate})
	if err != nil {
		panic(err)
	}
	broker := txboxtest.NewBroker(txboxtest.BrokerConfig{}) // your broker's Publisher and Subscriber
	r, err := relay.New(outbox, broker, relay.Config{Tracer: tracing.Relay()})
	if err != nil {
		panic(err)
	}
	c, err := consumer.New[*sql.Tx](drv, consumer.Config{Broker: broker, Tracer: tracing.Consumer()})
	if err != nil {
		panic(err)
	}
	_, _ = r, c
}

// Propagate writes the W3C trace context of the span in ctx: Outbox.Add
// stores it with the row as the message's traceparent header.
func ExampleTracing_Propagate() {
	tracing := txboxotel.New(txboxotel.Config{})
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	headers := map[string]string{}
	tracing.Propagate(ctx, headers)
	fmt.Println(headers["traceparent"])
	fmt.Println(tracing.SpanContext(headers).SpanID())
	// Output:
	// 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
	// b7ad6b7169203331
}
