package txboxasynq_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxasynq"
)

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
		rdb := testenv.Redis(t)
		queue := testenv.Name("txbt")
		testenv.DeleteKeys(t, rdb, "asynq:{"+queue+"}*")
		t.Cleanup(func() { rdb.SRem(context.Background(), "asynq:queues", queue) })
		p, err := txboxasynq.NewPublisher(rdb, txboxasynq.PublisherConfig{Queue: queue, Retention: time.Hour})
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

func TestConformance(t *testing.T) {
	t.Parallel()
	newPub, f := asynqSuite(t)
	brokertest.TestPublisher(t, newPub, f)
}

func TestRelay(t *testing.T) {
	t.Parallel()
	newPub, f := asynqSuite(t)
	brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, f)
}

// The retention is the dedupe window: a re-enqueue after the task was
// processed is still a duplicate, and counts as success.

func TestDuplicateAfterProcessing(t *testing.T) {
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

// An unreachable Redis is transient: no attempt is spent on an outage.
func TestUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	p, err := txboxasynq.NewPublisher(rdb, txboxasynq.PublisherConfig{})
	testenv.Must(t, err, "asynq publisher")
	testenv.PublishFailsTransiently(t, p)
}
