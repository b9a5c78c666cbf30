package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Logger adapts l to go-redis's logging interface, so that the lines
// go-redis writes to stderr by itself (a connection pool that fails to
// dial, a dropped connection, a failed reauthentication) go to l as
// warnings instead, with the attribute source=go-redis:
//
//	redis.SetLogger(redisstream.Logger(log))
//
// go-redis has one logger for the whole process, so redis.SetLogger is the
// caller's to call, once, at start-up.
func Logger(l *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return slogPrintf{l}
}

type slogPrintf struct{ l *slog.Logger }

func (s slogPrintf) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSuffix(fmt.Sprintf(format, v...), "\n")
	msg = strings.TrimPrefix(msg, "redis: ")
	s.l.WarnContext(ctx, msg, "source", "go-redis")
}
