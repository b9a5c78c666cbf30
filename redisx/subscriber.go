package redisx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
)

// Defaults of StreamSubscriberConfig.
const (
	DefaultBlock   = time.Second
	DefaultMinIdle = time.Minute
	// DefaultDeadSuffix names the dead-letter stream: Stream+DefaultDeadSuffix.
	DefaultDeadSuffix = ":dead"
)

// StreamSubscriberConfig configures a StreamSubscriber.
type StreamSubscriberConfig struct {
	// Stream is the stream to read (the publisher's StreamPrefix+topic).
	// Required.
	Stream string
	// Group is the consumer group; consumers of one group share the
	// stream's entries. Created (with the stream) if missing. Required.
	Group string
	// Consumer names this consumer within the group; it must be unique
	// among the group's live consumers and should be stable across
	// restarts of the same process. Required.
	Consumer string
	// StartID is where a new group starts reading: "0" (the whole stream)
	// or "$" (only entries added from now on). Default: "0".
	StartID string
	// Block bounds how long Fetch waits for new entries. Default: 1s.
	Block time.Duration
	// MinIdle is how long an entry stays delivered but unacknowledged
	// before any consumer of the group may claim it (its consumer died, or
	// nacked it). Default: 1m.
	MinIdle time.Duration
	// DeadStream receives entries passed to Dead. Default:
	// Stream+":dead".
	DeadStream string
}

// StreamSubscriber reads one stream through a consumer group.
//
// The life of an entry: Fetch delivers it; Ack removes it from the group's
// pending list; Nack leaves it pending and makes it claimable at once, so a
// later Fetch (of this or another consumer) delivers it again with
// Deliveries+1; an entry never acked or nacked (its consumer crashed) is
// claimed by a Fetch once it has been idle for MinIdle; Dead copies it to
// the dead-letter stream and acks it, atomically. A StreamSubscriber is
// safe for concurrent use.
type StreamSubscriber struct {
	rdb redis.UniversalClient
	cfg StreamSubscriberConfig
	// cursor is where the next XAUTOCLAIM scan starts.
	cursor chanCursor
}

// chanCursor is a mutex-free cursor (a one-slot channel).
type chanCursor chan string

// Delivery is one entry delivered to this consumer.
type Delivery struct {
	// Message is the entry as published: ID, Key, Payload and Headers;
	// Topic is the stream's name.
	Message txbox.Message
	// EntryID is the stream entry's id ("1700000000000-0").
	EntryID string
	// Deliveries counts how often the entry was delivered to the group,
	// this delivery included: 1 the first time.
	Deliveries int64
}

// NewStreamSubscriber checks cfg and creates the group (and the stream) if
// missing. rdb is a client the caller owns and closes.
func NewStreamSubscriber(ctx context.Context, rdb redis.UniversalClient, cfg StreamSubscriberConfig) (*StreamSubscriber, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: redisx: nil client", txbox.ErrInvalidConfig)
	}
	if cfg.Stream == "" || cfg.Group == "" || cfg.Consumer == "" {
		return nil, fmt.Errorf("%w: redisx: Stream, Group and Consumer are required", txbox.ErrInvalidConfig)
	}
	if cfg.Block < 0 || cfg.MinIdle < 0 {
		return nil, fmt.Errorf("%w: redisx: negative Block or MinIdle", txbox.ErrInvalidConfig)
	}
	if cfg.StartID == "" {
		cfg.StartID = "0"
	}
	if cfg.Block == 0 {
		cfg.Block = DefaultBlock
	}
	if cfg.MinIdle == 0 {
		cfg.MinIdle = DefaultMinIdle
	}
	if cfg.DeadStream == "" {
		cfg.DeadStream = cfg.Stream + DefaultDeadSuffix
	}
	err := rdb.XGroupCreateMkStream(ctx, cfg.Stream, cfg.Group, cfg.StartID).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return nil, fmt.Errorf("redisx: create group %s on %s: %w", cfg.Group, cfg.Stream, err)
	}
	s := &StreamSubscriber{rdb: rdb, cfg: cfg, cursor: make(chanCursor, 1)}
	s.cursor <- "0-0"
	return s, nil
}

// Fetch returns up to max deliveries: first entries claimed from the
// pending list (idle at least MinIdle), then new entries, waiting up to
// Block for them. It returns an empty slice, not an error, when none came.
func (s *StreamSubscriber) Fetch(ctx context.Context, max int) ([]Delivery, error) {
	if max <= 0 {
		max = 1
	}
	out, err := s.claim(ctx, max)
	if err != nil || len(out) > 0 {
		return out, err
	}
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: s.cfg.Group, Consumer: s.cfg.Consumer,
		Streams: []string{s.cfg.Stream, ">"}, Count: int64(max), Block: s.cfg.Block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisx: XREADGROUP %s: %w", s.cfg.Stream, err)
	}
	for _, st := range res {
		for _, m := range st.Messages {
			out = append(out, s.delivery(m, 1))
		}
	}
	return out, nil
}

// claim takes over entries idle for MinIdle and looks up their delivery
// counts.
func (s *StreamSubscriber) claim(ctx context.Context, max int) ([]Delivery, error) {
	var start string
	select {
	case start = <-s.cursor:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	msgs, next, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: s.cfg.Stream, Group: s.cfg.Group, Consumer: s.cfg.Consumer,
		MinIdle: s.cfg.MinIdle, Start: start, Count: int64(max),
	}).Result()
	if err != nil {
		s.cursor <- start
		return nil, fmt.Errorf("redisx: XAUTOCLAIM %s: %w", s.cfg.Stream, err)
	}
	s.cursor <- next
	if len(msgs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(msgs))
	for i, m := range msgs {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.cfg.Stream, Group: s.cfg.Group, Start: m.ID, End: m.ID, Count: 1})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisx: XPENDING %s: %w", s.cfg.Stream, err)
	}
	out := make([]Delivery, 0, len(msgs))
	for i, m := range msgs {
		n := int64(1)
		if p := cmds[i].Val(); len(p) == 1 {
			n = p[0].RetryCount
		}
		out = append(out, s.delivery(m, n))
	}
	return out, nil
}

func (s *StreamSubscriber) delivery(m redis.XMessage, n int64) Delivery {
	msg := txbox.Message{Topic: s.cfg.Stream}
	for k, v := range m.Values {
		str, _ := v.(string)
		switch {
		case k == FieldID:
			msg.ID = str
		case k == FieldKey:
			msg.Key = str
		case k == FieldPayload:
			msg.Payload = []byte(str)
		case strings.HasPrefix(k, HeaderFieldPrefix):
			if msg.Headers == nil {
				msg.Headers = map[string]string{}
			}
			msg.Headers[k[len(HeaderFieldPrefix):]] = str
		}
	}
	return Delivery{Message: msg, EntryID: m.ID, Deliveries: n}
}

// Ack acknowledges deliveries: the group will not deliver them again.
func (s *StreamSubscriber) Ack(ctx context.Context, ds ...Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.EntryID
	}
	if err := s.rdb.XAck(ctx, s.cfg.Stream, s.cfg.Group, ids...).Err(); err != nil {
		return fmt.Errorf("redisx: XACK %s: %w", s.cfg.Stream, err)
	}
	return nil
}

// Nack gives a delivery back: it stays pending and becomes claimable at
// once, so the next Fetch of any consumer of the group delivers it again.
func (s *StreamSubscriber) Nack(ctx context.Context, d Delivery) error {
	return s.NackAfter(ctx, d, 0)
}

// NackAfter gives a delivery back to be claimed again after delay. Redis
// has no delayed redelivery: the entry's idle time is set to MinIdle-delay,
// so a delay longer than MinIdle is cut to MinIdle.
func (s *StreamSubscriber) NackAfter(ctx context.Context, d Delivery, delay time.Duration) error {
	// XCLAIM … IDLE sets the entry's idle time; JUSTID leaves its delivery
	// count alone (the next XAUTOCLAIM counts the redelivery).
	idle := strconv.FormatInt(max(s.cfg.MinIdle-delay, 0).Milliseconds(), 10)
	err := s.rdb.Do(ctx, "XCLAIM", s.cfg.Stream, s.cfg.Group, s.cfg.Consumer, 0, d.EntryID, "IDLE", idle, "JUSTID").Err()
	if err != nil {
		return fmt.Errorf("redisx: nack %s %s: %w", s.cfg.Stream, d.EntryID, err)
	}
	return nil
}

// Dead appends the delivery, with reason in the field "error", to the
// dead-letter stream and acknowledges it, in one MULTI/EXEC.
func (s *StreamSubscriber) Dead(ctx context.Context, d Delivery, reason string) error {
	vals := Values(d.Message)
	vals = append(vals, "error", reason, "stream", s.cfg.Stream, "entry", d.EntryID, "deliveries", d.Deliveries)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.cfg.DeadStream, Values: vals})
		p.XAck(ctx, s.cfg.Stream, s.cfg.Group, d.EntryID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisx: dead-letter %s %s: %w", s.cfg.Stream, d.EntryID, err)
	}
	return nil
}

// DeadStream returns the name of the dead-letter stream.
func (s *StreamSubscriber) DeadStream() string { return s.cfg.DeadStream }
