package txboxrabbitmq

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox/internal/brokerurl"
)

// ParseURL checks url, amqp://user:password@host:5672/vhost or amqps://
// for TLS, and returns it as amqp.ParseURI reads it; NewConn checks its URL
// with it. Errors quote no password.
func ParseURL(url string) (amqp.URI, error) {
	u, err := brokerurl.Parse(url)
	if err != nil {
		return amqp.URI{}, fmt.Errorf("txboxrabbitmq: %w", err)
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return amqp.URI{}, errors.New("txboxrabbitmq: want amqp://user:pass@host:5672/vhost (or amqps:// for TLS)")
	}
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return amqp.URI{}, errors.New("txboxrabbitmq: " + brokerurl.Scrub(err.Error(), url))
	}
	return uri, nil
}
