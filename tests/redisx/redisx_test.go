package redisx_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/redisx"
	"github.com/txbox/txbox/tests/testenv"
)

// redisURL is the shared test server; tests isolate themselves by unique
// key prefixes and queue names and delete their keys afterwards (never
// FLUSHDB: others use the server).
func redisURL() string {
	if u := os.Getenv("TXBOX_TEST_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func client(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL())
	testenv.Must(t, err, "redis URL")
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		testenv.Unavailable(t, "Redis", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// cleanup deletes every key matching pattern when t ends.
func cleanup(t testing.TB, rdb *redis.Client, pattern string) {
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
}

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
					case k == redisx.FieldID:
						d.ID = s
					case k == redisx.FieldKey:
						d.Key = s
					case k == redisx.FieldPayload:
						d.Payload = []byte(s)
					case strings.HasPrefix(k, redisx.HeaderFieldPrefix):
						d.Headers[strings.TrimPrefix(k, redisx.HeaderFieldPrefix)] = s
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
	rdb := client(t)
	prefix := testenv.Name("txbt") + ":"
	cleanup(t, rdb, prefix+"*")
	f := brokertest.Features{
		PerKeyOrder: true, Headers: true,
		// A string where the stream should be: XADD fails with WRONGTYPE.
		Reject: func(t *testing.T, topic string) txbox.Message {
			testenv.Must(t, rdb.Set(context.Background(), prefix+topic, "not a stream", time.Hour).Err(), "set")
			return txbox.Message{ID: "rejected-" + topic, Topic: topic, Payload: []byte("x")}
		},
	}
	return func(t *testing.T) (txbox.Publisher, brokertest.Reader) {
		p, err := redisx.NewStreamPublisher(rdb, redisx.StreamPublisherConfig{StreamPrefix: prefix})
		testenv.Must(t, err, "publisher")
		return p, streamReader{rdb, prefix}
	}, f
}

func TestStreamConformance(t *testing.T) {
	t.Parallel()
	newPub, f := streamSuite(t)
	brokertest.TestPublisher(t, newPub, f)
}

func TestStreamRelay(t *testing.T) {
	t.Parallel()
	newPub, f := streamSuite(t)
	brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, f)
}

// asynqSuite runs a real asynq.Server on a queue of the test's own; its
// handler records every task it processes.
func asynqSuite(t *testing.T) (brokertest.NewFunc, brokertest.Features) {
	f := brokertest.Features{
		// PerKeyOrder: the publisher enqueues a key's messages in order,
		// and the one-worker server below runs tasks in enqueue order.
		Dedupe: true, Headers: true, PerKeyOrder: true,
		// asynq refuses a blank task type.
		Reject: func(t *testing.T, topic string) txbox.Message {
			return txbox.Message{ID: "rejected-" + topic, Topic: "  ", Payload: []byte("x")}
		},
	}
	return func(t *testing.T) (txbox.Publisher, brokertest.Reader) {
		rdb := client(t)
		queue := testenv.Name("txbt")
		cleanup(t, rdb, "asynq:{"+queue+"}*")
		t.Cleanup(func() { rdb.SRem(context.Background(), "asynq:queues", queue) })
		p, err := redisx.NewAsynqPublisher(rdb, redisx.AsynqConfig{Queue: queue, Retention: time.Hour})
		testenv.Must(t, err, "publisher")
		c := brokertest.NewCollector()
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			// One worker: tasks are processed in enqueue order, which the
			// suite's dedupe check reads (see brokertest.Reader).
			Concurrency: 1, Queues: map[string]int{queue: 1},
			TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.ErrorLevel,
		})
		testenv.Must(t, srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			c.Add(task.Type(), brokertest.Delivery{ID: id, Payload: task.Payload(), Headers: task.Headers()})
			return nil
		})), "asynq server")
		t.Cleanup(srv.Shutdown)
		return p, c
	}, f
}

func TestAsynqConformance(t *testing.T) {
	t.Parallel()
	newPub, f := asynqSuite(t)
	brokertest.TestPublisher(t, newPub, f)
}

func TestAsynqRelay(t *testing.T) {
	t.Parallel()
	newPub, f := asynqSuite(t)
	brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, f)
}

// The retention is the dedupe window: a re-enqueue after the task was
// processed is still a duplicate, and counts as success.
func TestAsynqDuplicateAfterProcessing(t *testing.T) {
	t.Parallel()
	newPub, f := asynqSuite(t)
	p, r := newPub(t)
	ctx := context.Background()
	m := txbox.Message{ID: testenv.Name("id"), Topic: "dup", Payload: []byte("1")}
	if errs := p.Publish(ctx, []txbox.Message{m}); errs != nil {
		t.Fatal(errs)
	}
	cctx, cancel := context.WithTimeout(ctx, f.Timeout+30*time.Second)
	defer cancel()
	if _, err := r.Read(cctx, "dup", 1); err != nil {
		t.Fatal(err)
	}
	// The task is now completed and retained.
	if errs := p.Publish(ctx, []txbox.Message{m, m}); errs != nil {
		t.Fatalf("re-publish of a retained task: %v, want success", errs)
	}
}

func TestAsynqConfigFromEnv(t *testing.T) {
	t.Setenv(redisx.EnvTaskRetention, "90m")
	c, err := redisx.AsynqConfigFromEnv(redisx.AsynqConfig{})
	if err != nil || c.Retention != 90*time.Minute {
		t.Fatalf("got %v, %v", c.Retention, err)
	}
	t.Setenv(redisx.EnvTaskRetention, "soon")
	if _, err := redisx.AsynqConfigFromEnv(redisx.AsynqConfig{}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Fatalf("bad value: %v", err)
	}
}

// An unreachable Redis is transient for both publishers: no attempt is
// spent on an outage.
func TestUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	sp, err := redisx.NewStreamPublisher(rdb, redisx.StreamPublisherConfig{})
	testenv.Must(t, err, "stream publisher")
	ap, err := redisx.NewAsynqPublisher(rdb, redisx.AsynqConfig{})
	testenv.Must(t, err, "asynq publisher")
	for name, p := range map[string]txbox.Publisher{"streams": sp, "asynq": ap} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs := p.Publish(ctx, []txbox.Message{{ID: "x", Topic: "t", Payload: []byte("x")}, {ID: "y", Topic: "t", Payload: []byte("y")}})
		cancel()
		if len(errs) != 2 {
			t.Fatalf("%s: %v, want two errors", name, errs)
		}
		for _, err := range errs {
			if err == nil || txbox.IsRejected(err) {
				t.Errorf("%s: %v, want a transient error", name, err)
			}
		}
	}
}
