package redisstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/brokerurl"
)

// FromURL connects to Redis at url (read by ParseURL), checks that it
// answers (PING) before ctx ends, and returns a Publisher over a client
// of its own, which its Close closes. The URL's maxlen=N is cfg.MaxLen
// when cfg.MaxLen is 0. An invalid url or cfg is a txbox.ErrInvalidConfig.
// Errors quote no password.
//
//	pub, err := redisstream.FromURL(ctx, "redis://127.0.0.1:6379/0?maxlen=100000", redisstream.PublisherConfig{Prefix: "shop."})
//	defer pub.Close()
func FromURL(ctx context.Context, url string, cfg PublisherConfig) (*Publisher, error) {
	opt, fromURL, err := ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = fromURL.MaxLen
	}
	rdb := redis.NewClient(opt)
	p, err := NewPublisher(rdb, cfg)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	p.owned = true
	if err := ping(ctx, rdb, url); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return p, nil
}

// DeadLettersFromURL connects to Redis at url as FromURL does and returns
// the dead letters of the bindings of a Subscriber configured with suffix
// as its DeadLetterSuffix ("": the default), which own the client: Close
// closes it. The URL's maxlen is the publisher's and is ignored here.
func DeadLettersFromURL(ctx context.Context, url, suffix string) (*DeadLetters, error) {
	opt, _, err := ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	rdb := redis.NewClient(opt)
	d, err := NewDeadLetters(rdb, suffix)
	if err == nil {
		err = ping(ctx, rdb, url)
	}
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	d.owned = true
	return d, nil
}

// Close closes the client of DeadLetters that DeadLettersFromURL made;
// those from NewDeadLetters leave it to its creator.
func (d *DeadLetters) Close() error {
	if d.owned {
		return d.rdb.Close()
	}
	return nil
}

// ping checks that the Redis of url answers.
func ping(ctx context.Context, rdb *redis.Client, url string) error {
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstream: connect to Redis at %s: %w", brokerurl.Redact(url), brokerurl.Error(err, url))
	}
	return nil
}

// Close closes the client of a Publisher that FromURL made; a Publisher
// from NewPublisher leaves the client to its creator.
func (p *Publisher) Close() error {
	if p.owned {
		return p.rdb.Close()
	}
	return nil
}
