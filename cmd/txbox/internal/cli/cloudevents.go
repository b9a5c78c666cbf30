package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/pflag"

	"github.com/txbox/txbox"
)

// EnvCloudEventsSource is the default of --cloudevents-source.
const EnvCloudEventsSource = "TXBOX_CLOUDEVENTS_SOURCE"

func registerCloudEvents(fs *pflag.FlagSet, source *string) {
	fs.StringVar(source, "cloudevents-source", envOr(EnvCloudEventsSource, ""),
		"NATS, RabbitMQ and Kafka: add CloudEvents binary-mode attributes to every message (id = message id, type = topic, time = created-at, specversion 1.0) with this source, a URI-reference such as /shop/orders or https://shop.example/orders; empty adds none (env "+EnvCloudEventsSource+")")
}

// checkCloudEvents refuses a source that is not a URI-reference, and any
// source on a broker with no CloudEvents binding (Redis Streams, asynq).
func checkCloudEvents(fs *pflag.FlagSet, scheme, source string) error {
	if source == "" {
		return nil
	}
	name := sourceOf(fs, "cloudevents-source", EnvCloudEventsSource)
	switch scheme {
	case "redis", "rediss", "asynq+redis", "asynq+rediss":
		return fmt.Errorf("%s is for NATS, RabbitMQ and Kafka (CloudEvents has no binding for %s://)", name, scheme)
	}
	if len(source) > txbox.MaxHeaderValLen {
		return fmt.Errorf("%s is %d bytes, over the limit of %d bytes of a header value (it is the ce-source header of every message)", name, len(source), txbox.MaxHeaderValLen)
	}
	if _, err := url.Parse(source); err != nil || !isPrintable(source) {
		return fmt.Errorf("%s %q: want a URI-reference such as /shop/orders", name, source)
	}
	return nil
}
