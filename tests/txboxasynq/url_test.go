package txboxasynq_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxasynq"
)

// A publisher made from what ParseURL returns enqueues to the URL's queue
// on the shared Redis.
func TestParseURLConnects(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t) // skip, or fail under CI=true, if Redis does not answer
	queue := testenv.Name("txurl")
	testenv.DeleteKeys(t, rdb, "asynq:{"+queue+"}*")
	t.Cleanup(func() { rdb.SRem(context.Background(), "asynq:queues", queue) })
	opt, cfg, err := txboxasynq.ParseURL("asynq+" + testenv.RedisURL() + "?queue=" + queue)
	testenv.Must(t, err, "ParseURL")
	cl := redis.NewClient(opt)
	defer cl.Close()
	pub, err := txboxasynq.NewPublisher(cl, cfg)
	testenv.Must(t, err, "publisher")
	ctx := context.Background()
	if errs := pub.Publish(ctx, []txbox.Message{{ID: testenv.Name("id"), Topic: "order.placed", Payload: []byte("{}")}}); errs != nil {
		t.Fatalf("publish: %v", errs)
	}
	if n, err := rdb.LLen(ctx, "asynq:{"+queue+"}:pending").Result(); err != nil || n != 1 {
		t.Fatalf("pending tasks %d, %v; want 1 in queue %s", n, err, queue)
	}
}
