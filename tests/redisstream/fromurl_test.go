package redisstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
)

// A Publisher from FromURL publishes on a client of its own, with the
// URL's maxlen, and its Close closes that client.
func TestFromURLPublishesAndOwnsItsClient(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("fu") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	ctx := context.Background()
	p, err := redisstream.FromURL(ctx, testenv.RedisURL()+"?maxlen=7", redisstream.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "FromURL")
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m1", Topic: "a", Payload: []byte("x")}}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	if n, err := rdb.XLen(ctx, prefix+"a").Result(); err != nil || n != 1 {
		t.Fatalf("stream holds %d entries (%v), want 1", n, err)
	}
	testenv.Must(t, p.Close(), "Close")
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m2", Topic: "a", Payload: []byte("x")}}); errs == nil {
		t.Fatal("Publish after Close succeeded: the client is still open")
	}
}

// FromURL's errors quote no password: neither the URL's nor one Redis
// quotes back.
func TestFromURLErrorsQuoteNoPassword(t *testing.T) {
	t.Parallel()
	testenv.Redis(t)
	const secret = "s3cr3tQZJ"
	ctx := context.Background()
	// No such user: AUTH fails.
	url := strings.Replace(testenv.RedisURL(), "redis://", "redis://"+testenv.Name("nouser")+":"+secret+"@", 1)
	_, err := redisstream.FromURL(ctx, url, redisstream.PublisherConfig{})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), ":xxxxx@") {
		t.Errorf("AUTH refused: %v; want an error quoting the URL without the password", err)
	}
	_, err = redisstream.FromURL(ctx, "redis://:"+secret+"@h:bad/0", redisstream.PublisherConfig{})
	if !errors.Is(err, txbox.ErrInvalidConfig) || strings.Contains(err.Error(), secret) {
		t.Errorf("bad port: %v; want txbox.ErrInvalidConfig without the password", err)
	}
}

// DeadLettersFromURL reads a binding's dead letters with a client of its
// own, which its Close closes; its errors quote no password.
func TestDeadLettersFromURL(t *testing.T) {
	t.Parallel()
	testenv.Redis(t)
	ctx := context.Background()
	binding := redisstream.Binding(testenv.Name("dl"), "g")
	d, err := redisstream.DeadLettersFromURL(ctx, testenv.RedisURL(), "")
	testenv.Must(t, err, "DeadLettersFromURL")
	page, err := d.List(ctx, binding, dlq.Query{})
	if err != nil || len(page.Letters) != 0 {
		t.Fatalf("List = %v, %v; want no dead letters", page.Letters, err)
	}
	testenv.Must(t, d.Close(), "Close")
	if _, err := d.List(ctx, binding, dlq.Query{}); err == nil {
		t.Fatal("List after Close succeeded: the client is still open")
	}
	const secret = "s3cr3tQZJ"
	url := strings.Replace(testenv.RedisURL(), "redis://", "redis://"+testenv.Name("nouser")+":"+secret+"@", 1)
	_, err = redisstream.DeadLettersFromURL(ctx, url, "")
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), ":xxxxx@") {
		t.Errorf("AUTH refused: %v; want an error quoting the URL without the password", err)
	}
}
