package redisstream_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox/redisstream"
)

// go-redis's own lines reach the slog.Logger as warnings: a pool that
// cannot dial logs through the process-wide logger, here routed by
// redis.SetLogger(redisstream.Logger(l)).
func TestLoggerRoutesGoRedisLines(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	lg := redisstream.Logger(l)
	redis.SetLogger(lg)
	lg.Printf(context.Background(), "redis: %s:%d: connection pool: %s\n", "pool.go", 12, "dial failed")
	out := buf.String()
	for _, want := range []string{`"level":"WARN"`, `"msg":"pool.go:12: connection pool: dial failed"`, `"source":"go-redis"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %s lacks %s", out, want)
		}
	}
}
