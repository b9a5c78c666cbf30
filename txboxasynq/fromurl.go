package txboxasynq

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/brokerurl"
)

// FromURL connects to the Redis of url (read by ParseURL), checks that it
// answers (PING) before ctx ends, and returns a Publisher over a client
// of its own, which its Close closes. The URL's queue=NAME is cfg.Queue
// when cfg.Queue is "". An invalid url or cfg is a txbox.ErrInvalidConfig.
// Errors quote no password.
//
//	pub, err := txboxasynq.FromURL(ctx, "asynq+redis://127.0.0.1:6379/0?queue=orders", txboxasynq.PublisherConfig{})
//	defer pub.Close()
func FromURL(ctx context.Context, url string, cfg PublisherConfig) (*Publisher, error) {
	opt, fromURL, err := ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	if cfg.Queue == "" {
		cfg.Queue = fromURL.Queue
	}
	rdb := redis.NewClient(opt)
	p, err := NewPublisher(rdb, cfg)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	p.rdb = rdb
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("txboxasynq: connect to Redis at %s: %w", brokerurl.Redact(url), brokerurl.Error(err, url))
	}
	return p, nil
}

// Close closes the Publisher's asynq client, and the Redis client of a
// Publisher that FromURL made; a Publisher from NewPublisher leaves the
// Redis client to its creator.
func (p *Publisher) Close() error {
	err := p.client.Close()
	if p.rdb != nil {
		err = p.rdb.Close()
	}
	return err
}
