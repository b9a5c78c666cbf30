package redisstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
)

// streamReader reads a stream with XRANGE.
type streamReader struct {
	rdb    *redis.Client
	prefix string
}

func (r streamReader) Read(ctx context.Context, topic string, n int) ([]brokertest.Delivery, error) {
	for {
		xs, err := r.rdb.XRange(ctx, r.prefix+topic, "-", "+").Result()
		if err != nil {
			return nil, err
		}
		if len(xs) >= n {
			out := make([]brokertest.Delivery, len(xs))
			for i, x := range xs {
				d := brokertest.Delivery{Headers: map[string]string{}}
				for k, v := range x.Values {
					s := v.(string)
					switch {
					case k == redisstream.FieldID:
						d.ID = s
					case k == redisstream.FieldKey:
						d.Key = s
					case k == redisstream.FieldPayload:
						d.Payload = []byte(s)
					case strings.HasPrefix(k, redisstream.HeaderFieldPrefix):
						d.Headers[strings.TrimPrefix(k, redisstream.HeaderFieldPrefix)] = s
					}
				}
				out[i] = d
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// streamSuite returns the conformance constructor and features for
// streams under one key prefix (each suite test uses topics of its own).
func streamSuite(t *testing.T) (brokertest.NewFunc, brokertest.Features) {
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txbt") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	f := brokertest.Features{
		PerKeyOrder: true, Headers: true,
		// A string where the stream should be: XADD fails with WRONGTYPE.
		Reject: func(t *testing.T, topic string) txbox.Message {
			testenv.Must(t, rdb.Set(context.Background(), prefix+topic, "not a stream", time.Hour).Err(), "set")
			return txbox.Message{ID: "rejected-" + topic, Topic: topic, Payload: []byte("x")}
		},
	}
	return func(t *testing.T) (txbox.Publisher, brokertest.Reader) {
		p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
		testenv.Must(t, err, "publisher")
		return p, streamReader{rdb, prefix}
	}, f
}

func TestConformance(t *testing.T) {
	t.Parallel()
	newPub, f := streamSuite(t)
	brokertest.TestPublisher(t, newPub, f)
}

func TestRelay(t *testing.T) {
	t.Parallel()
	newPub, f := streamSuite(t)
	brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, f)
}

// An unreachable Redis is transient: no attempt is spent on an outage.
func TestUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	p, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{})
	testenv.Must(t, err, "stream publisher")
	testenv.PublishFailsTransiently(t, p)
}
