package txboxasynq_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxasynq"
)

// What the publisher enqueues, read with asynq alone (its Inspector), is
// what docs/reference/wire-format.json lists for asynq, field by field.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t)
	queue := testenv.Name("txwire")
	testenv.DeleteKeys(t, rdb, "asynq:{"+queue+"}*")
	t.Cleanup(func() { rdb.SRem(context.Background(), "asynq:queues", queue) })
	p, err := txboxasynq.NewPublisher(rdb, txboxasynq.PublisherConfig{Queue: queue, Retention: time.Hour})
	testenv.Must(t, err, "publisher")
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, m := range []txbox.Message{testenv.WireMessage("wire.full"), testenv.WireBare("wire.bare")} {
		if errs := p.Publish(ctx, []txbox.Message{m}); errs != nil {
			t.Fatalf("publish: %v", errs)
		}
		info, err := insp.GetTaskInfo(queue, m.ID)
		testenv.Must(t, err, "task info")
		r := testenv.WireRead{"task:type": info.Type, "task:id": info.ID, "task:payload": string(info.Payload)}
		for k, v := range info.Headers {
			r["header:"+k] = v
		}
		testenv.CheckWire(t, "asynq", m, "", "", false, r)
	}
}
