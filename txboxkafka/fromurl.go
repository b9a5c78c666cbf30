package txboxkafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/brokerurl"
)

// FromURL makes a client for the seed brokers of url (read by ParseURL),
// with client id "txbox" and then opts (kgo.TransactionalID for a
// transactional Publisher, SASL, TLS), checks that a broker answers
// before ctx ends, and returns a Publisher over the client, which its
// Close closes. An invalid url or client is a txbox.ErrInvalidConfig.
//
//	pub, err := txboxkafka.FromURL(ctx, "kafka://127.0.0.1:9092", txboxkafka.PublisherConfig{Prefix: "shop."})
//	defer pub.Close()
func FromURL(ctx context.Context, url string, cfg PublisherConfig, opts ...kgo.Opt) (*Publisher, error) {
	cl, err := dial(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	p, err := NewPublisher(cl, cfg)
	if err != nil {
		cl.Close()
		return nil, err
	}
	p.owned = true
	return p, nil
}

// DeadLettersFromURL makes a client for url as FromURL does and returns
// the dead letters of the bindings of a Subscriber configured with suffix
// as its DeadLetterSuffix ("": the default), which own the client: Close
// closes it.
func DeadLettersFromURL(ctx context.Context, url, suffix string, opts ...kgo.Opt) (*DeadLetters, error) {
	cl, err := dial(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	d, err := NewDeadLetters(cl, suffix)
	if err != nil {
		cl.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// Close closes the client of DeadLetters that DeadLettersFromURL made;
// those from NewDeadLetters leave it to its creator.
func (d *DeadLetters) Close() error {
	if d.owned {
		d.cl.Close()
	}
	return nil
}

// dial makes a client for url and checks that a broker answers.
func dial(ctx context.Context, url string, opts []kgo.Opt) (*kgo.Client, error) {
	seeds, err := ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID("txbox")}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: txboxkafka: %w", txbox.ErrInvalidConfig, err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("txboxkafka: connect to Kafka at %s: %w", brokerurl.Redact(url), err)
	}
	return cl, nil
}

// Close closes the client of a Publisher that FromURL made; a Publisher
// from NewPublisher leaves the client to its creator.
func (p *Publisher) Close() error {
	if p.owned {
		p.cl.Close()
	}
	return nil
}
