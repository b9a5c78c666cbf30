package redisx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
)

// ConsumerConfig configures a ConsumerSubscriber.
type ConsumerConfig struct {
	// Consumer names this process within each group. Default:
	// hostname-pid.
	Consumer string
	// Block and MinIdle are as in StreamSubscriberConfig (defaults 1s and
	// 1m). MinIdle also caps the consumer's retry delay (see NackAfter).
	Block   time.Duration
	MinIdle time.Duration
}

// ConsumerSubscriber is the Redis Streams side of a consumer.Consumer. A
// binding is "STREAM/GROUP": the stream's name and a consumer group on it,
// which must exist (see EnsureGroup). Dead letters go to STREAM:dead.
type ConsumerSubscriber struct {
	rdb redis.UniversalClient
	cfg ConsumerConfig
}

var _ txbox.Subscriber = (*ConsumerSubscriber)(nil)

// NewConsumerSubscriber returns a ConsumerSubscriber over rdb, a client the
// caller owns and closes.
func NewConsumerSubscriber(rdb redis.UniversalClient, cfg ConsumerConfig) (*ConsumerSubscriber, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: redisx: nil client", txbox.ErrInvalidConfig)
	}
	if cfg.Block < 0 || cfg.MinIdle < 0 {
		return nil, fmt.Errorf("%w: redisx: negative Block or MinIdle", txbox.ErrInvalidConfig)
	}
	if cfg.Consumer == "" {
		host, _ := os.Hostname()
		cfg.Consumer = host + "-" + strconv.Itoa(os.Getpid())
	}
	return &ConsumerSubscriber{rdb: rdb, cfg: cfg}, nil
}

// EnsureGroup creates the consumer group (and the stream) if missing;
// startID "0" reads the whole stream, "$" only new entries.
func EnsureGroup(ctx context.Context, rdb redis.UniversalClient, stream, group, startID string) error {
	err := rdb.XGroupCreateMkStream(ctx, stream, group, startID).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisx: create group %s on %s: %w", group, stream, err)
	}
	return nil
}

func splitBinding(b string) (stream, group string, err error) {
	i := strings.LastIndex(b, "/")
	if i <= 0 || i == len(b)-1 {
		return "", "", fmt.Errorf("redisx: binding %q: want STREAM/GROUP", b)
	}
	return b[:i], b[i+1:], nil
}

// CheckBinding reports whether the binding's stream and group exist.
func (s *ConsumerSubscriber) CheckBinding(ctx context.Context, binding string) error {
	stream, group, err := splitBinding(binding)
	if err != nil {
		return err
	}
	groups, err := s.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return fmt.Errorf("redisx: stream %s does not exist (create it and the group with redisx.EnsureGroup or XGROUP CREATE %s %s 0 MKSTREAM)", stream, stream, group)
		}
		return fmt.Errorf("redisx: XINFO GROUPS %s: %w", stream, err)
	}
	for _, g := range groups {
		if g.Name == group {
			return nil
		}
	}
	return fmt.Errorf("redisx: stream %s has no consumer group %s (create it with redisx.EnsureGroup or XGROUP CREATE %s %s 0)", stream, group, stream, group)
}

// Subscribe starts reading the binding; prefetch bounds one fetch.
func (s *ConsumerSubscriber) Subscribe(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	stream, group, err := splitBinding(binding)
	if err != nil {
		return nil, err
	}
	sub, err := NewStreamSubscriber(ctx, s.rdb, StreamSubscriberConfig{
		Stream: stream, Group: group, Consumer: s.cfg.Consumer, Block: s.cfg.Block, MinIdle: s.cfg.MinIdle,
	})
	if err != nil {
		return nil, err
	}
	return &subscription{sub: sub, binding: binding, prefetch: max(prefetch, 1)}, nil
}

type subscription struct {
	sub      *StreamSubscriber
	binding  string
	prefetch int

	mu  sync.Mutex
	buf []Delivery
}

// Next returns the next delivery, fetching when the buffer is empty.
func (s *subscription) Next(ctx context.Context) (txbox.Delivery, error) {
	for {
		s.mu.Lock()
		if len(s.buf) > 0 {
			d := s.buf[0]
			s.buf = s.buf[1:]
			s.mu.Unlock()
			return &delivery{s: s, d: d}, nil
		}
		s.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ds, err := s.sub.Fetch(ctx, s.prefetch)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err // go-redis reconnects; the consumer calls Next again
		}
		s.mu.Lock()
		s.buf = append(s.buf, ds...)
		s.mu.Unlock()
	}
}

// Close releases the fetched deliveries Next did not return.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	buf := s.buf
	s.buf = nil
	s.mu.Unlock()
	var errs []error
	for _, d := range buf {
		errs = append(errs, s.sub.Nack(ctx, d))
	}
	return errors.Join(errs...)
}

type delivery struct {
	s *subscription
	d Delivery
}

func (d *delivery) Message() txbox.Received {
	return txbox.Received{Message: d.d.Message, Deliveries: int(d.d.Deliveries), Binding: d.s.binding}
}

func (d *delivery) Ack(ctx context.Context) error { return d.s.sub.Ack(ctx, d.d) }

func (d *delivery) Retry(ctx context.Context, delay time.Duration) error {
	return d.s.sub.NackAfter(ctx, d.d, delay)
}

func (d *delivery) DeadLetter(ctx context.Context, cause error) error {
	reason := "dead-lettered"
	if cause != nil {
		reason = cause.Error()
	}
	return d.s.sub.Dead(ctx, d.d, reason)
}
