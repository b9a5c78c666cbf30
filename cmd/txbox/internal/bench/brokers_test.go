package bench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txbox/txbox/tests/testenv"
)

// TestBrokers runs the broker benchmark when TXBOX_BENCH=brokers (rows per
// run from TXBOX_BENCH_ROWS, default 50,000; repetitions from TXBOX_BENCH_REPS,
// default 3); CI does not.
func TestBrokers(t *testing.T) {
	if os.Getenv("TXBOX_BENCH") != "brokers" {
		t.Skip("set TXBOX_BENCH=brokers to run the broker benchmark")
	}
	pool, _ := testenv.Postgres(t, 16)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { _ = rdb.Close() })
	// Kafka: franz-go's in-process fake cluster, which only the tests link.
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(6))
	testenv.Must(t, err, "kfake")
	t.Cleanup(kc.Close)
	cfg := BrokersConfig{Config: Config{Pool: pool, NATS: testenv.NATS(t), Out: os.Stdout}, Redis: rdb, RabbitMQURL: testenv.RabbitMQ(t),
		KafkaSeeds: kc.ListenAddrs(), KafkaName: "Kafka (kfake, in-process)"}
	if n, err := strconv.Atoi(os.Getenv("TXBOX_BENCH_ROWS")); err == nil {
		cfg.Rows = n
	}
	if n, err := strconv.Atoi(os.Getenv("TXBOX_BENCH_REPS")); err == nil {
		cfg.Reps = n
	}
	testenv.Must(t, Brokers(context.Background(), cfg), "brokers bench")
}
