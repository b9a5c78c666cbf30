package txboxrabbitmq

import (
	"fmt"

	"github.com/txbox/txbox/internal/dotname"
)

// MaxRoutingKey is the longest routing key (an AMQP short string).
const MaxRoutingKey = 255

// CheckPrefix checks a Prefix: dot-separated tokens, none empty, of
// printable characters other than spaces, with no '*' or '>', at most
// MaxRoutingKey-1 bytes so that a topic follows it. NewPublisher refuses a
// Prefix CheckPrefix refuses. The error reads after the name of the
// setting: `"a..b": empty token …` or `is 300 bytes, over …`.
func CheckPrefix(prefix string) error {
	if len(prefix) > MaxRoutingKey-1 {
		return fmt.Errorf("is %d bytes, over the limit of %d bytes: a RabbitMQ routing key is at most %d bytes, and the topic follows the prefix",
			len(prefix), MaxRoutingKey-1, MaxRoutingKey)
	}
	return dotname.Prefix(prefix)
}

// MaxExchange is the longest RabbitMQ exchange name (an AMQP short string).
const MaxExchange = 255

// CheckExchange checks an exchange name (PublisherConfig.Exchange,
// QueueConfig.Exchange): at most MaxExchange bytes; "" is the default
// exchange. NewPublisher and DeclareQueue refuse an Exchange CheckExchange
// refuses. The
// error reads after the name of the setting: `is 300 bytes, over …`.
func CheckExchange(name string) error {
	if len(name) > MaxExchange {
		return fmt.Errorf("is %d bytes, over RabbitMQ's limit of %d bytes for an exchange name", len(name), MaxExchange)
	}
	return nil
}
