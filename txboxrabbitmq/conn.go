package txboxrabbitmq

import (
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
)

// DefaultDialTimeout is ConnConfig.DialTimeout's default.
const DefaultDialTimeout = 10 * time.Second

// ConnConfig configures a Conn.
type ConnConfig struct {
	// DialTimeout bounds connecting. Default: DefaultDialTimeout (10s).
	DialTimeout time.Duration
	// AMQP is passed to amqp.DialConfig (TLS, SASL, vhost, client
	// properties). Default: its Dial is amqp.DefaultDial(DialTimeout) and
	// its Heartbeat 10s.
	AMQP amqp.Config
}

// Conn is the connection the Publisher and the Subscriber open their
// channels on. An amqp.Connection cannot reconnect, so a Conn redials:
// it connects on first use and again whenever the connection it holds
// was closed (the broker restarted, the network dropped it); channels
// opened before are lost with it, and the Publisher and the Subscriber
// open new ones. It is to RabbitMQ what a nats.Conn with
// nats.MaxReconnects(-1) is to NATS.
//
// The caller makes the Conn and passes it to NewPublisher, NewSubscriber
// and DeclareQueue; whoever created it closes it. It is safe for
// concurrent use.
type Conn struct {
	url string
	cfg amqp.Config

	mu     sync.Mutex
	conn   *amqp.Connection
	closed bool
}

// NewConn returns a Conn to url (amqp://user:pass@host:port/vhost, checked
// by ParseURL); it does not connect yet.
func NewConn(url string, cfg ConnConfig) (*Conn, error) {
	if url == "" {
		return nil, fmt.Errorf("%w: rabbitmq: URL is required", txbox.ErrInvalidConfig)
	}
	if _, err := ParseURL(url); err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	if cfg.DialTimeout < 0 {
		return nil, fmt.Errorf("%w: rabbitmq: negative DialTimeout", txbox.ErrInvalidConfig)
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.AMQP.Dial == nil {
		cfg.AMQP.Dial = amqp.DefaultDial(cfg.DialTimeout)
	}
	if cfg.AMQP.Heartbeat == 0 {
		cfg.AMQP.Heartbeat = 10 * time.Second
	}
	return &Conn{url: url, cfg: cfg.AMQP}, nil
}

// errConnClosed is returned by Channel after Close.
var errConnClosed = errors.New("txboxrabbitmq: connection closed by its owner")

// Channel opens a channel, connecting first if the Conn holds no live
// connection.
func (c *Conn) Channel() (*amqp.Channel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errConnClosed
	}
	if c.conn == nil || c.conn.IsClosed() {
		conn, err := amqp.DialConfig(c.url, c.cfg)
		if err != nil {
			return nil, fmt.Errorf("txboxrabbitmq: connect: %w", err)
		}
		c.conn = conn
	}
	ch, err := c.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("txboxrabbitmq: open channel: %w", err)
	}
	return ch, nil
}

// Close closes the connection; Channel fails from then on.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
