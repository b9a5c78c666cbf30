package redisstream_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
)

// A client and publisher made from what ParseURL returns reach the shared
// Redis and trim the stream to the URL's maxlen.
func TestParseURLConnects(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t) // skip, or fail under CI=true, if Redis does not answer
	prefix := testenv.Name("txurl") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	opt, cfg, err := redisstream.ParseURL(testenv.RedisURL() + "?maxlen=1")
	testenv.Must(t, err, "ParseURL")
	if cfg.MaxLen != 1 {
		t.Fatalf("MaxLen %d, want 1", cfg.MaxLen)
	}
	cl := redis.NewClient(opt)
	defer cl.Close()
	cfg.Prefix = prefix
	pub, err := redisstream.NewPublisher(cl, cfg)
	testenv.Must(t, err, "publisher")
	ctx := context.Background()
	for i := range 300 {
		if errs := pub.Publish(ctx, []txbox.Message{{ID: testenv.Name("id"), Topic: "orders", Payload: []byte{byte(i)}}}); errs != nil {
			t.Fatalf("publish: %v", errs)
		}
	}
	// MAXLEN ~ trims whole nodes of the stream (100 entries by default).
	if n, err := rdb.XLen(ctx, prefix+"orders").Result(); err != nil || n >= 300 {
		t.Fatalf("stream length %d, %v: want it trimmed below 300", n, err)
	}
}
