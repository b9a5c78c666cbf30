package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvRedis points tests at Redis; default redis://127.0.0.1:6379/0.
const EnvRedis = "TXBOX_TEST_REDIS"

// RedisURL is the URL of the shared Redis.
func RedisURL() string {
	if u := os.Getenv(EnvRedis); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Redis returns a client of the shared Redis, closed when the test ends
// (skip, or fail under CI=true, if Redis does not answer). Tests isolate
// themselves by unique key prefixes and queue names and delete their keys
// afterwards with DeleteKeys (never FLUSHDB: others use the server).
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	Must(t, err, "redis URL")
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		Unavailable(t, "Redis", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// DeleteKeys deletes every key matching pattern when t ends.
func DeleteKeys(t testing.TB, rdb *redis.Client, pattern string) {
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
}
