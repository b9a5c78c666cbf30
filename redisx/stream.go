package redisx

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
)

// Field names of a stream entry written by StreamPublisher.
const (
	FieldID      = "id"
	FieldKey     = "key"
	FieldPayload = "payload"
	// HeaderFieldPrefix is put before each header name.
	HeaderFieldPrefix = "h:"
)

// StreamPublisherConfig configures a StreamPublisher.
type StreamPublisherConfig struct {
	// StreamPrefix is put before every topic to name its stream.
	// Default: "" (stream = topic).
	StreamPrefix string
	// MaxLen, when positive, trims each stream to about this many entries
	// (XADD MAXLEN ~ MaxLen). Entries trimmed before a consumer group read
	// them are lost to it. Default: 0, no trimming.
	MaxLen int64
}

// StreamPublisher appends messages to Redis streams; see the package doc.
type StreamPublisher struct {
	rdb redis.UniversalClient
	cfg StreamPublisherConfig
}

var _ txbox.Publisher = (*StreamPublisher)(nil)

// NewStreamPublisher returns a StreamPublisher over rdb, a client the caller
// owns and closes.
func NewStreamPublisher(rdb redis.UniversalClient, cfg StreamPublisherConfig) (*StreamPublisher, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: redisx: nil client", txbox.ErrInvalidConfig)
	}
	if cfg.MaxLen < 0 {
		return nil, fmt.Errorf("%w: redisx: negative MaxLen", txbox.ErrInvalidConfig)
	}
	return &StreamPublisher{rdb: rdb, cfg: cfg}, nil
}

// Stream returns the stream a topic is written to.
func (p *StreamPublisher) Stream(topic string) string { return p.cfg.StreamPrefix + topic }

// Values returns the XADD field-value list for m; see the package doc.
func Values(m txbox.Message) []any {
	v := make([]any, 0, 6+2*len(m.Headers))
	v = append(v, FieldID, m.ID, FieldKey, m.Key, FieldPayload, m.Payload)
	for k, val := range m.Headers {
		if !txbox.IsReservedHeader(k) { // rows written by plain SQL are not validated by Add
			v = append(v, HeaderFieldPrefix+k, val)
		}
	}
	return v
}

// Publish appends msgs in one pipeline and returns per-message errors; see
// txbox.Publisher.
func (p *StreamPublisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
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
			errs[i] = classify(fmt.Errorf("redisx: XADD %s: %w", p.Stream(msgs[i].Topic), err))
		}
	}
	return errs
}

// transientPrefixes are Redis error replies that concern the server's state,
// not the message: they cost no attempt.
var transientPrefixes = []string{
	"OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN",
	"CLUSTERDOWN", "MOVED", "ASK", "NOREPLICAS", "MISCONF", "EXECABORT",
}

// classify marks Redis error replies about the message (WRONGTYPE: the
// stream's name holds another type; NOPERM: ACLs forbid the key; a
// malformed command) as rejected. Network errors, timeouts and replies about
// the server's state (OOM, LOADING, READONLY, failover …) are transient.
func classify(err error) error {
	var re redis.Error
	if !errors.As(err, &re) {
		return err
	}
	msg := re.Error()
	for _, p := range transientPrefixes {
		if strings.HasPrefix(msg, p) {
			return err
		}
	}
	if strings.HasPrefix(msg, "ERR max number of clients") || strings.HasPrefix(msg, "ERR Protocol error") {
		return err
	}
	return txbox.Reject(err)
}
