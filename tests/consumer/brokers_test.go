package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
)

// redisBroker makes a stream and a consumer group per flow on the shared
// Redis, under a per-test key prefix. ackWait is how long an entry stays
// unacknowledged before it is claimed again (the ack wait).
func redisBroker(t testing.TB, ackWait time.Duration) *broker {
	t.Helper()
	ctx := context.Background()
	rdb := testenv.Redis(t)
	prefix := testenv.Name("txbe") + ":"
	testenv.DeleteKeys(t, rdb, prefix+"*")
	const group = "g"
	for _, f := range flows {
		testenv.Must(t, redisstream.EnsureGroup(ctx, rdb, prefix+f, group, "0"), "group %s", f)
	}
	pub, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	sub, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: "c", Block: 50 * time.Millisecond, AckWait: ackWait})
	testenv.Must(t, err, "subscriber")
	dead, err := redisstream.NewDeadLetters(rdb, "")
	testenv.Must(t, err, "dead letters")
	return &broker{
		name: "redis", pub: pub, sub: sub, dead: dead,
		// The dead stream's entries carry the error and the delivery
		// count as fields.
		errHeader: "error", delHeader: "deliveries",
		topic:   func(f string) string { return f },
		binding: func(f string) string { return redisstream.Binding(prefix+f, group) },
		deadLetters: func(t testing.TB, f string) map[string]map[string]string {
			xs, err := rdb.XRange(ctx, prefix+f+redisstream.DefaultDeadLetterSuffix, "-", "+").Result()
			testenv.Must(t, err, "xrange dead stream")
			out := map[string]map[string]string{}
			for _, x := range xs {
				h := map[string]string{}
				for k, v := range x.Values {
					h[k] = fmt.Sprint(v)
				}
				out[h[redisstream.FieldID]] = h
			}
			return out
		},
	}
}

// kafkaBroker starts franz-go's in-process fake Kafka cluster (no Kafka
// server runs on the test machines) with a topic, its dead-letter topic
// and a consumer group per flow; each topic has the given partitions.
func kafkaBroker(t testing.TB, partitions int32) *broker {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	testenv.Must(t, err, "kfake")
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	testenv.Must(t, err, "kgo client")
	t.Cleanup(cl.Close)
	prefix := testenv.Name("t") + "."
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, f := range flows {
		for _, name := range []string{prefix + f, prefix + f + ".dead"} {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
			req.Topics = append(req.Topics, rt)
		}
	}
	resp, err := req.RequestWith(context.Background(), cl)
	testenv.Must(t, err, "create topics")
	for _, rt := range resp.Topics {
		testenv.Must(t, kerr.ErrorForCode(rt.ErrorCode), "create topic %s", rt.Topic)
	}
	pub, err := txboxkafka.NewPublisher(cl, txboxkafka.PublisherConfig{Prefix: prefix})
	testenv.Must(t, err, "publisher")
	scl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxWait(50*time.Millisecond))
	testenv.Must(t, err, "kgo client")
	t.Cleanup(scl.Close)
	sub, err := txboxkafka.NewSubscriber(scl, txboxkafka.SubscriberConfig{})
	testenv.Must(t, err, "subscriber")
	dead, err := txboxkafka.NewDeadLetters(scl, "")
	testenv.Must(t, err, "dead letters")

	// Dead letters are read by one group-less reader per dead topic that
	// accumulates what it has seen (a dead-letter topic only grows).
	var mu sync.Mutex
	readers := map[string]*kgo.Client{}
	seen := map[string]map[string]map[string]string{}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range readers {
			r.Close()
		}
	})
	return &broker{
		name: "kafka", pub: pub, sub: sub, dead: dead, rereads: true,
		errHeader: txbox.HeaderError, delHeader: txbox.HeaderDeliveries,
		topic:   func(f string) string { return f },
		binding: func(f string) string { return txboxkafka.Binding(prefix+f, prefix+f+".g") },
		deadLetters: func(t testing.TB, f string) map[string]map[string]string {
			mu.Lock()
			defer mu.Unlock()
			r := readers[f]
			if r == nil {
				var err error
				r, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(prefix+f+".dead"),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
				testenv.Must(t, err, "dead-letter reader")
				readers[f], seen[f] = r, map[string]map[string]string{}
			}
			// Poll until a poll brings nothing new.
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				fs := r.PollFetches(ctx)
				cancel()
				n := 0
				fs.EachRecord(func(rec *kgo.Record) {
					n++
					h := map[string]string{}
					for _, kh := range rec.Headers {
						h[kh.Key] = string(kh.Value)
					}
					seen[f][h[txbox.HeaderMessageID]] = h
				})
				if n == 0 {
					break
				}
			}
			out := make(map[string]map[string]string, len(seen[f]))
			for id, h := range seen[f] {
				out[id] = h
			}
			return out
		},
	}
}
