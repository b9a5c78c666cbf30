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
