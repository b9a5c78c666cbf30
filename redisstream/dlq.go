package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/internal/wire"
)

// Fields of a dead-letter entry beside the message's own (Values).
const (
	FieldError      = "error"      // why it was dead-lettered
	FieldStream     = "stream"     // the stream it came from
	FieldEntry      = "entry"      // its entry id there
	FieldDeliveries = "deliveries" // its deliveries to the group
	FieldGroup      = "group"      // the group (binding) it was dead-lettered from
	// FieldRedriveFor names, on an entry DeadLetters.Redrive appended to
	// the stream, the one group that is to handle it: the Subscriber's
	// readers of the stream's other groups ack it without handing it out.
	FieldRedriveFor = "redrive_for"
)

// DeadLetters implements dlq.Store on Redis Streams: a binding's dead
// letters are the entries of its stream's dead-letter stream
// (Subscriber.DeadLetterStream) whose group is the binding's (an entry
// without a group field belongs to every group of the stream); a Ref is
// the dead letter's entry id.
type DeadLetters struct {
	rdb    redis.UniversalClient
	suffix string
	owned  bool // made by DeadLettersFromURL: Close closes rdb
}

var _ dlq.Store = (*DeadLetters)(nil)

// NewDeadLetters returns the dead letters of the bindings of a Subscriber
// configured with suffix as its DeadLetterSuffix ("": the default).
func NewDeadLetters(rdb redis.UniversalClient, suffix string) (*DeadLetters, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: redisstream: nil client", txbox.ErrInvalidConfig)
	}
	if suffix == "" {
		suffix = DefaultDeadLetterSuffix
	}
	return &DeadLetters{rdb: rdb, suffix: suffix}, nil
}

// List returns the binding's dead letters matching q, oldest first.
func (d *DeadLetters) List(ctx context.Context, binding string, q dlq.Query) (dlq.Page, error) {
	stream, group, err := ParseBinding(binding)
	if err != nil {
		return dlq.Page{}, err
	}
	dead := stream + d.suffix
	start := "-"
	if q.After != "" {
		start = "(" + q.After
	}
	var p dlq.Page
	for {
		ms, err := d.rdb.XRangeN(ctx, dead, start, "+", 200).Result()
		if err != nil {
			return p, fmt.Errorf("redisstream: XRANGE %s: %w", dead, err)
		}
		for _, m := range ms {
			l, ok := decodeDeadLetter(binding, group, m)
			if !ok || !q.Match(l) {
				continue
			}
			if len(p.Letters) == max(q.Limit, 1) {
				p.More = true
				return p, nil
			}
			p.Letters = append(p.Letters, l)
		}
		if len(ms) < 200 {
			return p, nil
		}
		start = "(" + ms[len(ms)-1].ID
	}
}

// Get returns the dead letter whose entry id is ref.
func (d *DeadLetters) Get(ctx context.Context, binding, ref string) (dlq.Letter, error) {
	stream, group, err := ParseBinding(binding)
	if err != nil {
		return dlq.Letter{}, err
	}
	m, err := d.get(ctx, stream, ref)
	if err != nil {
		return dlq.Letter{}, err
	}
	l, ok := decodeDeadLetter(binding, group, m)
	if !ok {
		return dlq.Letter{}, fmt.Errorf("%w: entry %s of %s is a dead letter of another group", dlq.ErrNotFound, ref, stream+d.suffix)
	}
	return l, nil
}

func (d *DeadLetters) get(ctx context.Context, stream, ref string) (redis.XMessage, error) {
	dead := stream + d.suffix
	ms, err := d.rdb.XRangeN(ctx, dead, ref, ref, 1).Result()
	if err != nil {
		if strings.Contains(err.Error(), "Invalid stream ID") {
			return redis.XMessage{}, fmt.Errorf("redisstream: dead letter %q: want an entry id (1700000000000-0)", ref)
		}
		return redis.XMessage{}, fmt.Errorf("redisstream: XRANGE %s: %w", dead, err)
	}
	if len(ms) == 0 {
		return redis.XMessage{}, fmt.Errorf("%w: no entry %s in %s", dlq.ErrNotFound, ref, dead)
	}
	return ms[0], nil
}

// decodeDeadLetter decodes a dead-letter entry; ok is false when it belongs to
// another group.
func decodeDeadLetter(binding, group string, m redis.XMessage) (dlq.Letter, bool) {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	if g := str(FieldGroup); g != "" && g != group {
		return dlq.Letter{}, false
	}
	l := dlq.Letter{Ref: m.ID, Binding: binding, Error: str(FieldError)}
	l.Deliveries, _ = strconv.Atoi(str(FieldDeliveries))
	if ms, _, ok := strings.Cut(m.ID, "-"); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			l.DeadAt = time.UnixMilli(n).UTC()
		}
	}
	l.ID, l.Topic, l.Key, l.Payload = str(FieldID), str(FieldStream), str(FieldKey), []byte(str(FieldPayload))
	l.CreatedAt = wire.ParseTime(str(FieldCreatedAt))
	for k, v := range m.Values {
		if h, ok := strings.CutPrefix(k, HeaderFieldPrefix); ok {
			if l.Headers == nil {
				l.Headers = map[string]string{}
			}
			l.Headers[h], _ = v.(string)
		}
	}
	return l, true
}

// Redrive appends each dead letter to the stream it came from, as the
// Publisher wrote it (same id, key, payload, headers) plus FieldRedriveFor
// naming the binding's group, then deletes it from the dead-letter stream.
func (d *DeadLetters) Redrive(ctx context.Context, binding string, refs []string) (dlq.Result, error) {
	return d.each(ctx, binding, refs, func(stream string, l dlq.Letter) error {
		_, group, _ := ParseBinding(binding)
		vals := append(Values(l.Message), FieldRedriveFor, group)
		if err := d.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: vals}).Err(); err != nil {
			return fmt.Errorf("redisstream: redrive %s to %s: %w", l.Ref, stream, err)
		}
		return nil
	})
}

// Discard deletes the dead letters.
func (d *DeadLetters) Discard(ctx context.Context, binding string, refs []string) (dlq.Result, error) {
	return d.each(ctx, binding, refs, func(string, dlq.Letter) error { return nil })
}

func (d *DeadLetters) each(ctx context.Context, binding string, refs []string, do func(stream string, l dlq.Letter) error) (dlq.Result, error) {
	var r dlq.Result
	stream, _, err := ParseBinding(binding)
	if err != nil {
		return r, err
	}
	for _, ref := range refs {
		l, err := d.Get(ctx, binding, ref)
		if errors.Is(err, dlq.ErrNotFound) {
			r.Missed = append(r.Missed, ref)
			continue
		}
		if err != nil {
			return r, err
		}
		if err := do(stream, l); err != nil {
			return r, err
		}
		n, err := d.rdb.XDel(ctx, stream+d.suffix, ref).Result()
		if err != nil {
			return r, fmt.Errorf("redisstream: XDEL %s %s: %w", stream+d.suffix, ref, err)
		}
		if n == 0 {
			r.Missed = append(r.Missed, ref)
			continue
		}
		r.Done = append(r.Done, ref)
	}
	return r, nil
}
