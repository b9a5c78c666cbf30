package redisstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/redisreply"
	"github.com/txbox/txbox/internal/wire"
)

// Field names of a stream entry written by Publisher.
const (
	FieldID      = "id"
	FieldKey     = "key"
	FieldPayload = "payload"
	// FieldCreatedAt is the row's created_at (txbox.Message.CreatedAt), RFC
	// 3339 in UTC with nine fractional digits; absent when unknown.
	FieldCreatedAt = "created_at"
	// HeaderFieldPrefix is put before each header name.
	HeaderFieldPrefix = "h:"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Prefix is put before every topic to name its stream; CheckPrefix
	// says what it may hold. Default: "" (stream = topic).
	Prefix string
	// MaxLen, when positive, trims each stream to about this many entries
	// (XADD MAXLEN ~ MaxLen). Entries trimmed before a consumer group read
	// them are lost to it. Default: 0, no trimming.
	MaxLen int64
}

// Publisher appends messages to Redis streams; see the package doc.
type Publisher struct {
	rdb   redis.UniversalClient
	cfg   PublisherConfig
	owned bool // made by FromURL: Close closes rdb
}

var _ txbox.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher over rdb, a client the caller made;
// whoever created it closes it.
func NewPublisher(rdb redis.UniversalClient, cfg PublisherConfig) (*Publisher, error) {
	if err := CheckPrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: redisstream: Prefix %w", txbox.ErrInvalidConfig, err)
	}
	if rdb == nil {
		return nil, fmt.Errorf("%w: redisstream: nil client", txbox.ErrInvalidConfig)
	}
	if cfg.MaxLen < 0 {
		return nil, fmt.Errorf("%w: redisstream: negative MaxLen", txbox.ErrInvalidConfig)
	}
	return &Publisher{rdb: rdb, cfg: cfg}, nil
}

// Stream returns the stream a topic is written to.
func (p *Publisher) Stream(topic string) string { return p.cfg.Prefix + topic }

// Values returns the XADD field-value list for m; see the package doc. The
// Content-Type header, in any case, is the field h:Content-Type.
func Values(m txbox.Message) []any {
	v := make([]any, 0, 8+2*len(m.Headers))
	v = append(v, FieldID, m.ID, FieldKey, m.Key, FieldPayload, m.Payload)
	if !m.CreatedAt.IsZero() {
		v = append(v, FieldCreatedAt, wire.Time(m.CreatedAt))
	}
	for k, val := range m.Headers {
		switch {
		case txbox.IsReservedHeader(k): // rows written by plain SQL are not validated by Add
		case wire.IsContentType(k):
			v = append(v, HeaderFieldPrefix+wire.ContentTypeHeader, val)
		default:
			v = append(v, HeaderFieldPrefix+k, val)
		}
	}
	return v
}

// Publish appends msgs in one pipeline and returns per-message errors; see
// txbox.Publisher.
func (p *Publisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	pipe := p.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	for i, m := range msgs {
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: p.Stream(m.Topic),
			MaxLen: p.cfg.MaxLen,
			Approx: p.cfg.MaxLen > 0,
			Values: Values(m),
		})
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var errs []error
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = fmt.Errorf("redisstream: XADD %s: %w", p.Stream(msgs[i].Topic), err)
			if redisreply.MessageFault(err) {
				errs[i] = txbox.Reject(errs[i])
			}
		}
	}
	return errs
}
