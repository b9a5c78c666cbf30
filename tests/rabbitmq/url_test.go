package rabbitmq_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// The URI ParseURL returns is the shared RabbitMQ's, and a Conn to the URL
// it accepted opens a channel there.
func TestParseURLConnects(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ(t) // skip, or fail under CI=true, if RabbitMQ does not answer
	uri, err := txboxrabbitmq.ParseURL(url)
	testenv.Must(t, err, "ParseURL")
	conn, err := amqp.Dial(uri.String())
	testenv.Must(t, err, "dial %s", uri.Host)
	_ = conn.Close()
	c, err := txboxrabbitmq.NewConn(url, txboxrabbitmq.ConnConfig{})
	testenv.Must(t, err, "NewConn")
	defer c.Close()
	ch, err := c.Channel()
	testenv.Must(t, err, "channel")
	_ = ch.Close()
}
