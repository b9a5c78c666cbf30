package redisstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// Defaults of SubscriberConfig.
const (
	DefaultBlock   = time.Second
	DefaultAckWait = time.Minute
	// DefaultDeadLetterSuffix names a binding's dead-letter stream:
	// STREAM+DefaultDeadLetterSuffix.
	DefaultDeadLetterSuffix = ":dead"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Consumer names this process within each group; it must be unique
	// among the group's live consumers and should be stable across
	// restarts of the same process. Default: hostname-pid.
	Consumer string
	// Block bounds how long one read waits for new entries. Default: 1s.
	Block time.Duration
	// AckWait is how long an entry stays delivered but unacknowledged
	// before any consumer of the group may claim it (XAUTOCLAIM's
	// min-idle-time: its consumer died, or gave it back). It also caps the
	// retry delay (see Delivery.Retry). Default: 1m.
	AckWait time.Duration
	// DeadLetterSuffix names a binding's dead-letter stream:
	// STREAM+DeadLetterSuffix. Default: DefaultDeadLetterSuffix (":dead").
	DeadLetterSuffix string
}

// Binding returns the binding of consumer group group on stream, for
// consumer.HandlerConfig.Binding: "STREAM/GROUP".
func Binding(stream, group string) string { return stream + "/" + group }

// ParseBinding splits a binding made by Binding. A stream's name may hold
// "/"; a group's may not.
func ParseBinding(b string) (stream, group string, err error) {
	i := strings.LastIndex(b, "/")
	if i <= 0 || i == len(b)-1 {
		return "", "", fmt.Errorf("redisstream: binding %q: want STREAM/GROUP (build it with redisstream.Binding)", b)
	}
	return b[:i], b[i+1:], nil
}

// Subscriber implements txbox.Subscriber on Redis Streams. A binding is a
// consumer group on a stream (see Binding), which must exist (see
// EnsureGroup).
//
// The life of an entry: a read delivers it (XREADGROUP); Ack removes it
// from the group's pending list (XACK); Retry leaves it pending and makes
// it claimable after the delay, so a later read (of this or another
// consumer of the group) delivers it again with Deliveries+1; an entry
// never settled (its consumer crashed) is claimed (XAUTOCLAIM) once it
// has been idle for AckWait, with its delivery count from XPENDING;
// DeadLetter acks it and copies it to the dead-letter stream, atomically,
// unless it was no longer pending (another consumer of the group settled
// it first).
type Subscriber struct {
	rdb redis.UniversalClient
	cfg SubscriberConfig
}

var _ txbox.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber over rdb, a client the caller made;
// whoever created it closes it.
func NewSubscriber(rdb redis.UniversalClient, cfg SubscriberConfig) (*Subscriber, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: redisstream: nil client", txbox.ErrInvalidConfig)
	}
	if cfg.Block < 0 || cfg.AckWait < 0 {
		return nil, fmt.Errorf("%w: redisstream: negative Block or AckWait", txbox.ErrInvalidConfig)
	}
	if cfg.Consumer == "" {
		host, _ := os.Hostname()
		cfg.Consumer = host + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.Block == 0 {
		cfg.Block = DefaultBlock
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.DeadLetterSuffix == "" {
		cfg.DeadLetterSuffix = DefaultDeadLetterSuffix
	}
	return &Subscriber{rdb: rdb, cfg: cfg}, nil
}

// DeadLetterStream is where the dead letters of a binding on stream go.
func (s *Subscriber) DeadLetterStream(stream string) string { return stream + s.cfg.DeadLetterSuffix }

// EnsureGroup creates the consumer group (and the stream) if missing;
// startID "0" reads the whole stream, "$" only new entries.
func EnsureGroup(ctx context.Context, rdb redis.UniversalClient, stream, group, startID string) error {
	err := rdb.XGroupCreateMkStream(ctx, stream, group, startID).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisstream: create group %s on %s: %w", group, stream, err)
	}
	return nil
}

// CheckBinding reports whether the binding's stream and group exist.
func (s *Subscriber) CheckBinding(ctx context.Context, binding string) error {
	stream, group, err := ParseBinding(binding)
	if err != nil {
		return err
	}
	groups, err := s.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return fmt.Errorf("redisstream: stream %s does not exist (create it and the group with redisstream.EnsureGroup or XGROUP CREATE %s %s 0 MKSTREAM)", stream, stream, group)
		}
		return fmt.Errorf("redisstream: XINFO GROUPS %s: %w", stream, err)
	}
	for _, g := range groups {
		if g.Name == group {
			return nil
		}
	}
	return fmt.Errorf("redisstream: stream %s has no consumer group %s (create it with redisstream.EnsureGroup or XGROUP CREATE %s %s 0)", stream, group, stream, group)
}

// Subscribe starts reading the binding, creating its group (and stream)
// if missing; prefetch bounds one read.
func (s *Subscriber) Subscribe(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	stream, group, err := ParseBinding(binding)
	if err != nil {
		return nil, err
	}
	if err := EnsureGroup(ctx, s.rdb, stream, group, "0"); err != nil {
		return nil, err
	}
	r := &reader{rdb: s.rdb, cfg: s.cfg, stream: stream, group: group, deadStream: s.DeadLetterStream(stream), cursor: make(chan string, 1)}
	r.cursor <- "0-0"
	return &subscription{r: r, binding: binding, prefetch: max(prefetch, 1)}, nil
}

// reader reads one stream through a consumer group.
type reader struct {
	rdb           redis.UniversalClient
	cfg           SubscriberConfig
	stream, group string
	deadStream    string
	// cursor is where the next XAUTOCLAIM scan starts: a one-slot
	// channel, a mutex that a context can abandon.
	cursor chan string
	acks   acks // see ack.go
}

// entry is one stream entry delivered to this consumer.
type entry struct {
	msg        txbox.Message // Topic is the stream's name
	id         string        // the stream entry's id ("1700000000000-0")
	deliveries int64         // to the group, this one included
	redriveFor string        // FieldRedriveFor: the one group to handle it
}

// fetch returns up to n entries: first entries claimed from the pending
// list (idle at least AckWait), then new entries, waiting up to Block for
// them. It returns none, not an error, when none came.
func (r *reader) fetch(ctx context.Context, n int) ([]entry, error) {
	out, err := r.claim(ctx, n)
	if err != nil || len(out) > 0 {
		return out, err
	}
	res, err := r.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: r.group, Consumer: r.cfg.Consumer,
		Streams: []string{r.stream, ">"}, Count: int64(n), Block: r.cfg.Block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisstream: XREADGROUP %s: %w", r.stream, err)
	}
	for _, st := range res {
		for _, m := range st.Messages {
			out = append(out, r.entry(m, 1))
		}
	}
	return out, nil
}

// claim takes over entries idle for AckWait and looks up their delivery
// counts.
func (r *reader) claim(ctx context.Context, n int) ([]entry, error) {
	var start string
	select {
	case start = <-r.cursor:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	msgs, next, err := r.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: r.stream, Group: r.group, Consumer: r.cfg.Consumer,
		MinIdle: r.cfg.AckWait, Start: start, Count: int64(n),
	}).Result()
	if err != nil {
		r.cursor <- start
		return nil, fmt.Errorf("redisstream: XAUTOCLAIM %s: %w", r.stream, err)
	}
	r.cursor <- next
	if len(msgs) == 0 {
		return nil, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(msgs))
	for i, m := range msgs {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: r.stream, Group: r.group, Start: m.ID, End: m.ID, Count: 1})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisstream: XPENDING %s: %w", r.stream, err)
	}
	out := make([]entry, 0, len(msgs))
	for i, m := range msgs {
		p := cmds[i].Val()
		if len(p) != 1 {
			// Settled between XAUTOCLAIM and XPENDING (its first
			// delivery, still running when it was claimed, acked it):
			// handing it over again would run it a second time with a
			// delivery count of 1.
			continue
		}
		out = append(out, r.entry(m, p[0].RetryCount))
	}
	return out, nil
}

func (r *reader) entry(m redis.XMessage, n int64) entry {
	msg := txbox.Message{Topic: r.stream}
	redriveFor := ""
	for k, v := range m.Values {
		str, _ := v.(string)
		switch {
		case k == FieldID:
			msg.ID = str
		case k == FieldKey:
			msg.Key = str
		case k == FieldPayload:
			msg.Payload = []byte(str)
		case k == FieldCreatedAt:
			msg.CreatedAt = wire.ParseTime(str)
		case k == FieldRedriveFor:
			redriveFor = str
		case strings.HasPrefix(k, HeaderFieldPrefix):
			if msg.Headers == nil {
				msg.Headers = map[string]string{}
			}
			msg.Headers[k[len(HeaderFieldPrefix):]] = str
		}
	}
	return entry{msg: msg, id: m.ID, deliveries: n, redriveFor: redriveFor}
}

func (r *reader) ack(ctx context.Context, e entry) error {
	return r.acks.ack(ctx, r, e.id)
}

// nackAfter gives an entry back to be claimed again after delay. Redis
// has no delayed redelivery: the entry's idle time is set to
// AckWait-delay, so a delay longer than AckWait is cut to AckWait.
func (r *reader) nackAfter(ctx context.Context, e entry, delay time.Duration) error {
	// XCLAIM … IDLE sets the entry's idle time; JUSTID leaves its delivery
	// count alone (the next XAUTOCLAIM counts the redelivery).
	idle := strconv.FormatInt(max(r.cfg.AckWait-delay, 0).Milliseconds(), 10)
	err := r.rdb.Do(ctx, "XCLAIM", r.stream, r.group, r.cfg.Consumer, 0, e.id, "IDLE", idle, "JUSTID").Err()
	if err != nil {
		return fmt.Errorf("redisstream: nack %s %s: %w", r.stream, e.id, err)
	}
	return nil
}

// deadLetter acknowledges an entry and, only if it was still pending (no
// other consumer of the group settled it meanwhile), appends its copy to
// the dead-letter stream, in one script: an entry claimed by two
// consumers in turn (the first one stalled past AckWait) gets one copy at
// most, and none if the other one acked it.
var deadLetter = redis.NewScript(`
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
return 1
`)

// dead appends the entry, with reason in the field "error", to the
// dead-letter stream and acknowledges it (see deadLetter).
func (r *reader) dead(ctx context.Context, e entry, reason string) error {
	vals := Values(e.msg)
	vals = append(vals, FieldError, reason, FieldStream, r.stream, FieldEntry, e.id, FieldDeliveries, e.deliveries, FieldGroup, r.group)
	args := append([]any{r.group, e.id}, vals...)
	if err := deadLetter.Run(ctx, r.rdb, []string{r.stream, r.deadStream}, args...).Err(); err != nil {
		return fmt.Errorf("redisstream: dead-letter %s %s: %w", r.stream, e.id, err)
	}
	return nil
}

type subscription struct {
	r        *reader
	binding  string
	prefetch int

	mu     sync.Mutex
	buf    []entry
	keep   *time.Timer // while buf holds entries: keepBuffered
	closed bool
}

// Next returns the next delivery, reading when the buffer is empty.
func (s *subscription) Next(ctx context.Context) (txbox.Delivery, error) {
	for {
		s.mu.Lock()
		if len(s.buf) > 0 {
			e := s.buf[0]
			s.buf = s.buf[1:]
			s.mu.Unlock()
			if e.redriveFor != "" && e.redriveFor != s.r.group {
				_ = s.r.ack(ctx, e) // a dead letter of another group, redriven to it
				continue
			}
			return &delivery{s: s, e: e}, nil
		}
		s.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		es, err := s.r.fetch(ctx, s.prefetch)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err // go-redis reconnects; the consumer calls Next again
		}
		s.mu.Lock()
		s.buf = append(s.buf, es...)
		if len(s.buf) > 0 && s.keep == nil && !s.closed {
			s.keep = time.AfterFunc(s.r.cfg.AckWait/3, s.keepBuffered)
		}
		s.mu.Unlock()
	}
}

// keepBuffered resets the idle time of the entries read and not yet
// handed out (touch), every third of AckWait while there are any: a read
// of the group by another consumer claims entries idle for AckWait, and
// one waiting here behind busy workers would otherwise run there too. An
// entry that is no longer pending for this consumer (claimed by another
// while a touch failed) is dropped from the buffer: the other has it.
func (s *subscription) keepBuffered() {
	s.mu.Lock()
	ids := make([]string, len(s.buf))
	for i, e := range s.buf {
		ids[i] = e.id
	}
	s.mu.Unlock()
	r := s.r
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.AckWait/3)
	defer cancel()
	gone := map[string]bool{}
	if len(ids) > 0 {
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(ids))
		for i, id := range ids {
			cmds[i] = touch.Eval(ctx, pipe, []string{r.stream}, r.group, r.cfg.Consumer, id) // Eval: in a pipeline, Run cannot fall back from EVALSHA
		}
		_, _ = pipe.Exec(ctx) // if it fails, another consumer may claim the entries once they are idle for AckWait
		for i, c := range cmds {
			if n, err := c.Int(); err == nil && n == 0 {
				gone[ids[i]] = true
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(gone) > 0 {
		s.buf = slices.DeleteFunc(s.buf, func(e entry) bool { return gone[e.id] })
	}
	if len(s.buf) == 0 || s.closed {
		s.keep = nil
		return
	}
	s.keep.Reset(r.cfg.AckWait / 3)
}

// Close gives back the entries read but not returned by Next: they are
// claimable at once.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	buf := s.buf
	s.buf, s.closed = nil, true
	if s.keep != nil {
		s.keep.Stop()
	}
	s.mu.Unlock()
	var errs []error
	for _, e := range buf {
		errs = append(errs, s.r.nackAfter(ctx, e, 0))
	}
	return errors.Join(errs...)
}

type delivery struct {
	s *subscription
	e entry
}

func (d *delivery) Message() txbox.Received {
	return txbox.Received{Message: d.e.msg, Deliveries: int(d.e.deliveries), Binding: d.s.binding}
}

func (d *delivery) Ack(ctx context.Context) error { return d.s.r.ack(ctx, d.e) }

// Retry leaves the entry pending, claimable after delay (at most AckWait).
func (d *delivery) Retry(ctx context.Context, delay time.Duration) error {
	return d.s.r.nackAfter(ctx, d.e, delay)
}

// DeadLetter appends the entry with the error, its stream, entry id and
// delivery count to the dead-letter stream and acks it, atomically.
func (d *delivery) DeadLetter(ctx context.Context, cause error) error {
	reason := "dead-lettered"
	if cause != nil {
		reason = cause.Error()
	}
	return d.s.r.dead(ctx, d.e, reason)
}
