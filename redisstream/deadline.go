package redisstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
)

var (
	_ txbox.DeadlineExtender = (*delivery)(nil)
	_ txbox.HorizonReporter  = (*Subscriber)(nil)
)

// errNotOwned: the entry is no longer pending for this consumer.
var errNotOwned = errors.New("redisstream: the entry is no longer pending for this consumer (acked, or claimed by another)")

// touch resets the idle time of an entry still pending for this consumer
// (XCLAIM to itself with JUSTID, which leaves the delivery count alone),
// and only then: checked and claimed in one script, so that an entry
// another consumer has claimed meanwhile is not taken back.
var touch = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 1 and p[1][2] == ARGV[2] then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
  return 1
end
return 0
`)

// AckDeadline is SubscriberConfig.AckWait: how long the entry may stay
// idle before a read of the group claims it again.
func (d *delivery) AckDeadline() time.Duration { return d.s.r.cfg.AckWait }

// ExtendDeadline resets the entry's idle time, so that it is not claimed
// again while its handler runs.
func (d *delivery) ExtendDeadline(ctx context.Context) error {
	r := d.s.r
	n, err := touch.Run(ctx, r.rdb, []string{r.stream}, r.group, r.cfg.Consumer, d.e.id).Int()
	if err != nil {
		return fmt.Errorf("redisstream: keep %s %s alive: %w", r.stream, d.e.id, err)
	}
	if n == 0 {
		return errNotOwned
	}
	return nil
}

// Horizon reports that a stream's horizon cannot be known: entries stay
// until the producer trims them (XADD MAXLEN / MINID, XTRIM), which the
// stream does not record, and a consumer group can be moved back to any
// of them (XGROUP SETID).
func (s *Subscriber) Horizon(_ context.Context, binding string) (txbox.Horizon, error) {
	stream, _, err := ParseBinding(binding)
	if err != nil {
		return txbox.Horizon{}, err
	}
	return txbox.Horizon{Detail: fmt.Sprintf("stream %s: Redis Streams keep entries until they are trimmed, which the stream does not record", stream)}, nil
}
