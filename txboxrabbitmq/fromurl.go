package txboxrabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/brokerurl"
)

// FromURL connects to RabbitMQ at url (read by ParseURL) with conn's
// settings, checks that cfg.Exchange, when set, exists, and returns a
// Publisher over a Conn of its own, which its Close closes. It returns
// when ctx ends, or after conn.DialTimeout at most. An invalid url or
// cfg is a txbox.ErrInvalidConfig. Errors quote no password.
//
//	pub, err := txboxrabbitmq.FromURL(ctx, os.Getenv("AMQP_URL"), txboxrabbitmq.PublisherConfig{Exchange: "events"}, txboxrabbitmq.ConnConfig{})
//	defer pub.Close()
func FromURL(ctx context.Context, url string, cfg PublisherConfig, conn ConnConfig) (*Publisher, error) {
	c, err := NewConn(url, conn)
	if err != nil {
		return nil, err
	}
	p, err := NewPublisher(c, cfg)
	if err != nil {
		return nil, err
	}
	p.owned = true
	done := make(chan error, 1)
	go func() { done <- p.checkExchange() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		go p.Close() // once the dial in flight ends
		return nil, fmt.Errorf("txboxrabbitmq: connect to RabbitMQ at %s: %w", brokerurl.Redact(url), ctx.Err())
	}
	if err != nil {
		_ = p.Close()
		return nil, brokerurl.Error(err, url)
	}
	return p, nil
}

// DeadLettersFromURL connects to RabbitMQ at url with conn's settings, as
// FromURL does, and returns the dead letters of the queues there, over a
// Conn of their own, which Close closes.
func DeadLettersFromURL(ctx context.Context, url string, conn ConnConfig) (*DeadLetters, error) {
	c, err := NewConn(url, conn)
	if err != nil {
		return nil, err
	}
	d, err := NewDeadLetters(c)
	if err != nil {
		return nil, err
	}
	d.owned = true
	done := make(chan error, 1)
	go func() {
		ch, err := c.Channel()
		if err == nil {
			_ = ch.Close()
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		go c.Close() // once the dial in flight ends
		return nil, fmt.Errorf("txboxrabbitmq: connect to RabbitMQ at %s: %w", brokerurl.Redact(url), ctx.Err())
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("txboxrabbitmq: connect to RabbitMQ at %s: %w", brokerurl.Redact(url), brokerurl.Error(err, url))
	}
	return d, nil
}

// Close closes the Conn of DeadLetters that DeadLettersFromURL made;
// those from NewDeadLetters leave it to its creator.
func (d *DeadLetters) Close() error {
	if d.owned {
		return d.conn.Close()
	}
	return nil
}

// checkExchange connects and checks that the exchange exists.
func (p *Publisher) checkExchange() error {
	ch, err := p.conn.Channel()
	if err != nil {
		return fmt.Errorf("txboxrabbitmq: connect to RabbitMQ at %s: %w", brokerurl.Redact(p.conn.url), err)
	}
	defer ch.Close()
	if x := p.cfg.Exchange; x != "" {
		if err := ch.ExchangeDeclarePassive(x, "topic", true, false, false, false, nil); err != nil {
			return fmt.Errorf("txboxrabbitmq: exchange %q: %w (declare it first, e.g. rabbitmqadmin declare exchange name=%s type=topic durable=true)", x, err, x)
		}
	}
	return nil
}

// IsPermanentConnectError reports whether err, from FromURL,
// DeadLettersFromURL, NewConn or NewPublisher, says the broker refuses for
// good, so that trying again does not help: an invalid url or config
// (txbox.ErrInvalidConfig), a refused login (amqp.ErrSASL,
// amqp.ErrCredentials) or virtual host (amqp.ErrVhost), or an
// *amqp.Error of ACCESS_REFUSED, NOT_FOUND (an exchange that does not
// exist), NOT_ALLOWED or PRECONDITION_FAILED. A broker that is down,
// restarting or unreachable is not: a caller may try again.
func IsPermanentConnectError(err error) bool {
	if err == nil {
		return false
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused, amqp.NotFound, amqp.NotAllowed, amqp.PreconditionFailed:
			return true
		}
	}
	return errors.Is(err, txbox.ErrInvalidConfig) || errors.Is(err, amqp.ErrSASL) ||
		errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost)
}
