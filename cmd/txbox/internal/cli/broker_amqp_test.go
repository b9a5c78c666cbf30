package cli

import (
	"strings"
	"testing"
)

// The RabbitMQ flags are refused with another broker, --cloudevents-source
// with one that has no CloudEvents binding; amqp:// and amqps:// URLs are
// accepted.
func TestAMQPFlags(t *testing.T) {
	for _, tc := range []struct {
		f    brokerFlags
		want string // "" for accepted
	}{
		{brokerFlags{url: "amqp://guest:guest@127.0.0.1:5672/"}, ""},
		{brokerFlags{url: "amqps://u:p@rabbit.example:5671/shop", amqp: amqpFlags{exchange: "events", allowUnroutable: true}}, ""},
		{brokerFlags{url: "nats://127.0.0.1:4222", amqp: amqpFlags{exchange: "events"}}, "--exchange is for RabbitMQ"},
		{brokerFlags{url: "redis://127.0.0.1:6379/0", amqp: amqpFlags{allowUnroutable: true}}, "--allow-unroutable is for RabbitMQ"},
		{brokerFlags{url: "amqp://127.0.0.1:5672/", amqp: amqpFlags{ceSeparator: ":"}}, ""},
		{brokerFlags{url: "amqp://127.0.0.1:5672/", amqp: amqpFlags{ceSeparator: "-"}}, `--cloudevents-amqp-separator "-": want "_" or ":"`},
		{brokerFlags{natsListen: DefaultNATSListen, amqp: amqpFlags{exchange: "events"}}, "not the embedded NATS server"},
		{brokerFlags{url: "amqp://127.0.0.1", stream: "S"}, "--stream is for NATS JetStream"},
		{brokerFlags{url: "kafka://127.0.0.1:9092", ceSource: "/shop/orders"}, ""},
		{brokerFlags{natsListen: DefaultNATSListen, ceSource: "https://shop.example/orders"}, ""},
		{brokerFlags{url: "redis://127.0.0.1:6379/0", ceSource: "/shop"}, "CloudEvents has no binding for redis://"},
		{brokerFlags{url: "asynq+redis://127.0.0.1:6379/0", ceSource: "/shop"}, "CloudEvents has no binding"},
	} {
		err := tc.f.check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v; want %q", tc.f, err, tc.want)
		}
	}
}
