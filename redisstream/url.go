package redisstream

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox/internal/brokerurl"
)

// ParseURL reads url, redis://[user:password@]host:6379/db or rediss://
// for TLS, as redis.ParseURL does, with one query parameter of its own:
// maxlen=N, the PublisherConfig.MaxLen it returns (XADD MAXLEN ~ N; default
// 0, no trimming). It returns the client's options and that
// PublisherConfig, whose other fields the caller sets. Errors quote no
// password.
//
//	opt, cfg, err := redisstream.ParseURL(os.Getenv("REDIS_URL"))
//	rdb := redis.NewClient(opt)
//	cfg.Prefix = "shop."
//	pub, err := redisstream.NewPublisher(rdb, cfg)
func ParseURL(url string) (*redis.Options, PublisherConfig, error) {
	u, err := brokerurl.Parse(url)
	if err != nil {
		return nil, PublisherConfig{}, fmt.Errorf("redisstream: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, PublisherConfig{}, errors.New("redisstream: want redis://host:6379/0 (or rediss:// for TLS)")
	}
	var cfg PublisherConfig
	q := u.Query()
	if v := q.Get("maxlen"); v != "" {
		if cfg.MaxLen, err = strconv.ParseInt(v, 10, 64); err != nil || cfg.MaxLen < 0 {
			return nil, PublisherConfig{}, fmt.Errorf("redisstream: maxlen=%q: want a non-negative integer", v)
		}
	}
	q.Del("maxlen")
	u.RawQuery = q.Encode()
	opt, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, PublisherConfig{}, errors.New("redisstream: " + brokerurl.Scrub(err.Error(), url))
	}
	return opt, cfg, nil
}
