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
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redisstream: connect to Redis at %s: %w", brokerurl.Redact(url), brokerurl.Error(err, url))
	}
	return p, nil
}

// Close closes the client of a Publisher that FromURL made; a Publisher
// from NewPublisher leaves the client to its creator.
func (p *Publisher) Close() error {
	if p.owned {
		return p.rdb.Close()
	}
	return nil
}
