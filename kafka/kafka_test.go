package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/kafka"
)

// cluster starts franz-go's in-process fake Kafka cluster (no Kafka server
// runs on the development machines) with topics created on first use.
func cluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3)}, opts...)...)
	testenv.Must(t, err, "kfake")
	t.Cleanup(c.Close)
	return c
}

func newClient(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation()}, opts...)...)
	testenv.Must(t, err, "kgo client")
	t.Cleanup(cl.Close)
	return cl
}

// reader consumes a topic from its start with a direct (group-less)
// consumer on every Read.
type reader struct {
	c      *kfake.Cluster
	prefix string
}

func (r reader) Read(ctx context.Context, topic string, n int) ([]brokertest.Delivery, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.ListenAddrs()...), kgo.ConsumeTopics(r.prefix+topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []brokertest.Delivery
	// Per-key order holds per partition: messages of a key come in order
	// whatever the interleaving of partitions.
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		fs.EachRecord(func(rec *kgo.Record) {
			d := brokertest.Delivery{Key: string(rec.Key), Payload: rec.Value, Headers: map[string]string{}}
			for _, h := range rec.Headers {
				if h.Key == kafka.HeaderMessageID {
					d.ID = string(h.Value)
				} else {
					d.Headers[h.Key] = string(h.Value)
				}
			}
			out = append(out, d)
		})
	}
	return out, nil
}

func suite(t *testing.T) (brokertest.NewFunc, brokertest.Features) {
	c := cluster(t)
	f := brokertest.Features{
		PerKeyOrder: true, Headers: true,
		// Over the producer's 1 MB batch limit: MESSAGE_TOO_LARGE.
		Reject: func(t *testing.T, topic string) txbox.Message {
			return txbox.Message{ID: "rejected-" + topic, Topic: topic, Payload: make([]byte, 2<<20)}
		},
	}
	return func(t *testing.T) (txbox.Publisher, brokertest.Reader) {
		prefix := testenv.Name("t") + "."
		p, err := kafka.NewPublisher(newClient(t, c), kafka.PublisherConfig{TopicPrefix: prefix})
		testenv.Must(t, err, "publisher")
		return p, reader{c, prefix}
	}, f
}

func TestConformance(t *testing.T) {
	t.Parallel()
	newPub, f := suite(t)
	brokertest.TestPublisher(t, newPub, f)
}

func TestRelay(t *testing.T) {
	t.Parallel()
	newPub, f := suite(t)
	brokertest.TestRelay(t, newPub, f)
}

// NewPublisher refuses a client that would weaken delivery.
func TestPublisherNeedsIdempotentAcksAll(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	for name, opt := range map[string]kgo.Opt{
		"no idempotence": kgo.DisableIdempotentWrite(),
		"leader ack":     kgo.RequiredAcks(kgo.LeaderAck()),
	} {
		opts := []kgo.Opt{opt}
		if name == "leader ack" {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		if _, err := kafka.NewPublisher(newClient(t, c, opts...), kafka.PublisherConfig{}); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := kafka.NewPublisher(newClient(t, c), kafka.PublisherConfig{}); err != nil {
		t.Fatalf("default client: %v", err)
	}
}

// A topic the cluster says does not exist is rejected; an unreachable
// cluster is transient.
func TestClassify(t *testing.T) {
	t.Parallel()
	t.Run("unknown topic", func(t *testing.T) {
		t.Parallel()
		c, err := kfake.NewCluster(kfake.NumBrokers(1)) // no auto-creation
		testenv.Must(t, err, "kfake")
		t.Cleanup(c.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.UnknownTopicRetries(1))
		testenv.Must(t, err, "client")
		t.Cleanup(cl.Close)
		p, err := kafka.NewPublisher(cl, kafka.PublisherConfig{})
		testenv.Must(t, err, "publisher")
		errs := p.Publish(context.Background(), []txbox.Message{{ID: "x", Topic: "missing", Payload: []byte("x")}})
		if len(errs) != 1 || !txbox.IsRejected(errs[0]) {
			t.Fatalf("unknown topic: %v, want rejected", errs)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
		testenv.Must(t, err, "client")
		t.Cleanup(cl.Close)
		p, err := kafka.NewPublisher(cl, kafka.PublisherConfig{})
		testenv.Must(t, err, "publisher")
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		errs := p.Publish(ctx, []txbox.Message{{ID: "x", Topic: "t", Payload: []byte("x")}})
		if len(errs) != 1 || errs[0] == nil || txbox.IsRejected(errs[0]) {
			t.Fatalf("unreachable cluster: %v, want a transient error", errs)
		}
	})
}

// The subscriber: ack commits, nack redelivers with a higher count, dead
// letters land on the dead topic, and a new group member resumes after
// the last commit.
func TestSubscriber(t *testing.T) {
	t.Parallel()
	c := cluster(t, kfake.DefaultNumPartitions(1))
	p, err := kafka.NewPublisher(newClient(t, c), kafka.PublisherConfig{TopicPrefix: "sub."})
	testenv.Must(t, err, "publisher")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var msgs []txbox.Message
	for _, id := range []string{"a", "b", "c", "d"} {
		msgs = append(msgs, txbox.Message{ID: id, Topic: "orders", Key: "k", Payload: []byte(id), Headers: map[string]string{"h": id}})
	}
	if errs := p.Publish(ctx, msgs); errs != nil {
		t.Fatal(errs)
	}
	newSub := func() (*kafka.Subscriber, *kgo.Client) {
		cl := newClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("sub.orders"), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
		s, err := kafka.NewSubscriber(cl, kafka.SubscriberConfig{TopicPrefix: "sub."})
		testenv.Must(t, err, "subscriber")
		return s, cl
	}
	s, cl1 := newSub()
	next := func(s *kafka.Subscriber) kafka.Delivery {
		t.Helper()
		for {
			ds, err := s.Fetch(ctx, 1)
			testenv.Must(t, err, "fetch")
			if len(ds) == 1 {
				return ds[0]
			}
		}
	}
	d := next(s)
	if d.Message.ID != "a" || d.Message.Topic != "orders" || d.Message.Key != "k" || d.Message.Headers["h"] != "a" || d.Deliveries != 1 {
		t.Fatalf("first delivery: %+v", d)
	}
	testenv.Must(t, s.Ack(ctx, d), "ack")
	d = next(s)
	if d.Message.ID != "b" {
		t.Fatalf("after ack: %s", d.Message.ID)
	}
	testenv.Must(t, s.Nack(ctx, d), "nack")
	d = next(s)
	if d.Message.ID != "b" || d.Deliveries != 2 {
		t.Fatalf("after nack: %s, deliveries %d (want b, 2)", d.Message.ID, d.Deliveries)
	}
	testenv.Must(t, s.Dead(ctx, d, "poison"), "dead")
	// c is delivered and not acked; the member leaves: the next member of
	// the group resumes after the last commit, at c.
	if d = next(s); d.Message.ID != "c" {
		t.Fatalf("after dead letter: %s", d.Message.ID)
	}
	cl1.Close()
	s2, _ := newSub()
	if d = next(s2); d.Message.ID != "c" || d.Deliveries != 1 {
		t.Fatalf("new member: %s (deliveries %d), want c", d.Message.ID, d.Deliveries)
	}
	c2 := newClient(t, c, kgo.ConsumeTopics("sub.orders.dead"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := c2.PollFetches(ctx)
	var dead []*kgo.Record
	fs.EachRecord(func(r *kgo.Record) { dead = append(dead, r) })
	if len(dead) != 1 || string(dead[0].Value) != "b" {
		t.Fatalf("dead topic: %d records", len(dead))
	}
	var cause string
	for _, h := range dead[0].Headers {
		if h.Key == "Txbox-Error" {
			cause = string(h.Value)
		}
	}
	if !strings.Contains(cause, "poison") {
		t.Fatalf("dead record cause %q", cause)
	}
}
