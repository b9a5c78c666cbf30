package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/brokerurl"
)

// DefaultReconnectWait is the wait between reconnect attempts of a
// connection FromURL makes.
const DefaultReconnectWait = 250 * time.Millisecond

// FromURL connects to the NATS servers of url (read by ParseURL), checks
// that one answers before ctx ends (within 10 s when ctx has no
// deadline), and returns a Publisher over the connection, which its
// Close closes. The connection is named "txbox", gives up a connect
// attempt after 5 s and reconnects forever, every DefaultReconnectWait;
// opts are applied after these (a nats.ClosedHandler or
// nats.DisconnectErrHandler to log the connection's events, credentials,
// TLS). An invalid url is a txbox.ErrInvalidConfig. Errors quote no
// password.
//
//	pub, err := natsjs.FromURL(ctx, os.Getenv("NATS_URL"), natsjs.PublisherConfig{Prefix: "shop."})
//	defer pub.Close()
func FromURL(ctx context.Context, url string, cfg PublisherConfig, opts ...nats.Option) (*Publisher, error) {
	nc, err := dial(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	p, err := NewPublisher(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.owned = true
	return p, nil
}

// DeadLettersFromURL connects to the NATS servers of url as FromURL does
// and returns the dead letters of the bindings of a Subscriber configured
// with prefix as its DeadLetterPrefix ("": the default), which own the
// connection: Close closes it.
func DeadLettersFromURL(ctx context.Context, url, prefix string, opts ...nats.Option) (*DeadLetters, error) {
	nc, err := dial(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	d, err := NewDeadLetters(nc, prefix)
	if err != nil {
		nc.Close()
		return nil, err
	}
	d.nc = nc
	return d, nil
}

// Close closes the connection of DeadLetters that DeadLettersFromURL
// made; those from NewDeadLetters leave it to its creator.
func (d *DeadLetters) Close() error {
	if d.nc != nil {
		d.nc.Close()
	}
	return nil
}

// dial connects to url for FromURL and DeadLettersFromURL.
func dial(ctx context.Context, url string, opts []nats.Option) (*nats.Conn, error) {
	servers, err := ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	desc := brokerurl.Redact(url)
	opts = append([]nats.Option{nats.Name("txbox"), nats.Timeout(5 * time.Second),
		nats.MaxReconnects(-1), nats.ReconnectWait(DefaultReconnectWait)}, opts...)
	nc, err := nats.Connect(strings.Join(servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("natsjs: connect to NATS at %s: %w", desc, brokerurl.Error(err, url))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsjs: connect to NATS at %s: %w", desc, brokerurl.Error(err, url))
	}
	return nc, nil
}

// Conn returns the connection the Publisher publishes on (to ensure a
// stream or subscribe on it).
func (p *Publisher) Conn() *nats.Conn { return p.nc }

// Close closes the connection of a Publisher that FromURL made; a
// Publisher from NewPublisher leaves the connection to its creator.
func (p *Publisher) Close() error {
	if p.owned {
		p.nc.Close()
	}
	return nil
}

// IsPermanentConnectError reports whether err, from FromURL,
// DeadLettersFromURL, NewPublisher or EnsureStream, says the server
// refuses for good, so that trying again does not help: an invalid url
// (txbox.ErrInvalidConfig), an authentication error (nats.ErrAuthorization,
// ErrAuthExpired, ErrAuthRevoked, ErrAccountAuthExpired), or a JetStream
// API error other than 503 (a stream that does not exist, a stream
// configuration the server refuses). A server that is down, restarting or
// unreachable, and JetStream not ready yet (503), are not: a caller may
// try again.
func IsPermanentConnectError(err error) bool {
	var api *jetstream.APIError
	switch {
	case err == nil:
		return false
	case errors.Is(err, txbox.ErrInvalidConfig),
		errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return true
	case errors.As(err, &api):
		return api.Code != 503
	}
	return false
}
