package txboxasynq

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox/internal/brokerurl"
)

// ParseURL reads url, asynq+redis://[user:password@]host:6379/db or
// asynq+rediss:// for TLS (redis:// and rediss:// are read alike), as
// redis.ParseURL reads the URL without its "asynq+", with one query
// parameter of its own: queue=NAME, the PublisherConfig.Queue it returns
// (default DefaultQueue). It returns the client's options and that
// PublisherConfig, whose other fields the caller sets. Errors quote no
// password.
//
//	opt, cfg, err := txboxasynq.ParseURL("asynq+redis://127.0.0.1:6379/0?queue=orders")
//	rdb := redis.NewClient(opt)
//	pub, err := txboxasynq.NewPublisher(rdb, cfg)
func ParseURL(url string) (*redis.Options, PublisherConfig, error) {
	u, err := brokerurl.Parse(strings.TrimPrefix(url, "asynq+"))
	if err != nil {
		return nil, PublisherConfig{}, fmt.Errorf("txboxasynq: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, PublisherConfig{}, errors.New("txboxasynq: want asynq+redis://host:6379/0 (or asynq+rediss:// for TLS)")
	}
	q := u.Query()
	cfg := PublisherConfig{Queue: q.Get("queue")}
	if strings.TrimSpace(cfg.Queue) != cfg.Queue {
		return nil, PublisherConfig{}, fmt.Errorf("txboxasynq: queue=%q has surrounding spaces", cfg.Queue)
	}
	if cfg.Queue == "" {
		cfg.Queue = DefaultQueue
	}
	q.Del("queue")
	u.RawQuery = q.Encode()
	opt, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, PublisherConfig{}, errors.New("txboxasynq: " + brokerurl.Scrub(err.Error(), url))
	}
	return opt, cfg, nil
}
