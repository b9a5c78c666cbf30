package txboxasynq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxasynq"
)

// A Publisher from FromURL enqueues on the URL's queue with a client of
// its own, which its Close closes.
func TestFromURLEnqueuesOnTheURLsQueue(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	queue := testenv.Name("fu")
	testenv.DeleteKeys(t, rdb, "asynq:{"+queue+"}*")
	t.Cleanup(func() { rdb.SRem(context.Background(), "asynq:queues", queue) })
	ctx := context.Background()
	url := strings.Replace(testenv.RedisURL(), "redis://", "asynq+redis://", 1) + "?queue=" + queue
	p, err := txboxasynq.FromURL(ctx, url, txboxasynq.PublisherConfig{})
	testenv.Must(t, err, "FromURL")
	if p.Queue() != queue {
		t.Fatalf("Queue() = %q, want %q", p.Queue(), queue)
	}
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m1", Topic: "t", Payload: []byte("x")}}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	if n, err := rdb.LLen(ctx, "asynq:{"+queue+"}:pending").Result(); err != nil || n != 1 {
		t.Fatalf("queue holds %d pending tasks (%v), want 1", n, err)
	}
	testenv.Must(t, p.Close(), "Close")
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m2", Topic: "t", Payload: []byte("x")}}); errs == nil {
		t.Fatal("Publish after Close succeeded: the client is still open")
	}
}

// FromURL's errors quote no password.
func TestFromURLErrorsQuoteNoPassword(t *testing.T) {
	t.Parallel()
	testenv.Redis(t)
	const secret = "s3cr3tQZJ"
	ctx := context.Background()
	url := strings.Replace(testenv.RedisURL(), "redis://", "asynq+redis://"+testenv.Name("nouser")+":"+secret+"@", 1)
	_, err := txboxasynq.FromURL(ctx, url, txboxasynq.PublisherConfig{})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), ":xxxxx@") {
		t.Errorf("AUTH refused: %v; want an error quoting the URL without the password", err)
	}
	_, err = txboxasynq.FromURL(ctx, "asynq+redis://:"+secret+"@h:bad/0", txboxasynq.PublisherConfig{})
	if !errors.Is(err, txbox.ErrInvalidConfig) || strings.Contains(err.Error(), secret) {
		t.Errorf("bad port: %v; want txbox.ErrInvalidConfig without the password", err)
	}
}
