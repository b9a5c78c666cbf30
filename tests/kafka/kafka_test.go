package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/brokertest"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
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

// subClient is the client a Subscriber's group members are made from:
// it fetches with a short wait and, unlike newClient's, creates no topics.
func subClient(t testing.TB, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxWait(50*time.Millisecond))
	testenv.Must(t, err, "kgo client")
	t.Cleanup(cl.Close)
	return cl
}

// reader consumes a topic from its start with a direct (group-less)
// consumer on every Read.
type reader struct {
	c         *kfake.Cluster
	prefix    string
	committed bool // read_committed: no record of an open or aborted transaction
}

func (r reader) Read(ctx context.Context, topic string, n int) ([]brokertest.Delivery, error) {
	iso := kgo.ReadUncommitted()
	if r.committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.ListenAddrs()...), kgo.ConsumeTopics(r.prefix+topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond), kgo.FetchIsolationLevel(iso))
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
				if h.Key == txbox.HeaderMessageID {
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
		p, err := txboxkafka.NewPublisher(newClient(t, c), txboxkafka.PublisherConfig{Prefix: prefix})
		testenv.Must(t, err, "publisher")
		return p, reader{c: c, prefix: prefix}
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
	brokertest.TestRelay(t, testenv.PgxDriver(t, 8), newPub, f)
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
		if _, err := txboxkafka.NewPublisher(newClient(t, c, opts...), txboxkafka.PublisherConfig{}); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := txboxkafka.NewPublisher(newClient(t, c), txboxkafka.PublisherConfig{}); err != nil {
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
		p, err := txboxkafka.NewPublisher(cl, txboxkafka.PublisherConfig{})
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
		p, err := txboxkafka.NewPublisher(cl, txboxkafka.PublisherConfig{})
		testenv.Must(t, err, "publisher")
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		errs := p.Publish(ctx, []txbox.Message{{ID: "x", Topic: "t", Payload: []byte("x")}})
		if len(errs) != 1 || errs[0] == nil || txbox.IsRejected(errs[0]) {
			t.Fatalf("unreachable cluster: %v, want a transient error", errs)
		}
	})
}

// The subscriber: ack commits, retry redelivers with a higher count, dead
// letters land on the dead topic, and a new group member resumes after
// the last commit.
func TestSubscriber(t *testing.T) {
	t.Parallel()
	c := cluster(t, kfake.DefaultNumPartitions(1))
	p, err := txboxkafka.NewPublisher(newClient(t, c), txboxkafka.PublisherConfig{})
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
	s, err := txboxkafka.NewSubscriber(newClient(t, c, kgo.FetchMaxWait(50*time.Millisecond)), txboxkafka.SubscriberConfig{MaxRetryWait: 10 * time.Millisecond})
	testenv.Must(t, err, "subscriber")
	binding := txboxkafka.Binding("orders", "g")
	next := func(sub txbox.Subscription) (txbox.Delivery, txbox.Received) {
		t.Helper()
		d, err := sub.Next(ctx)
		testenv.Must(t, err, "next")
		return d, d.Message()
	}
	s1, err := s.Subscribe(ctx, binding, 1)
	testenv.Must(t, err, "subscribe")
	d, m := next(s1)
	if m.ID != "a" || m.Topic != "orders" || m.Key != "k" || m.Headers["h"] != "a" || m.Deliveries != 1 || m.Binding != binding {
		t.Fatalf("first delivery: %+v", m)
	}
	testenv.Must(t, d.Ack(ctx), "ack")
	if d, m = next(s1); m.ID != "b" {
		t.Fatalf("after ack: %s", m.ID)
	}
	// The retried copy of b goes behind c and d.
	testenv.Must(t, d.Retry(ctx, 0), "retry")
	if _, m = next(s1); m.ID != "c" {
		t.Fatalf("after retry: %s, want c", m.ID)
	}
	if _, m = next(s1); m.ID != "d" {
		t.Fatalf("after c: %s, want d", m.ID)
	}
	d, m = next(s1)
	if m.ID != "b" || m.Deliveries != 2 {
		t.Fatalf("after retry: %s, deliveries %d (want b, 2)", m.ID, m.Deliveries)
	}
	testenv.Must(t, d.DeadLetter(ctx, errors.New("poison")), "dead")
	// c and d are delivered and not settled; the member leaves: the next
	// member of the group resumes after the last commit, at c.
	testenv.Must(t, s1.Close(ctx), "close")
	s2, err := s.Subscribe(ctx, binding, 1)
	testenv.Must(t, err, "subscribe")
	defer func() { _ = s2.Close(ctx) }()
	if _, m = next(s2); m.ID != "c" || m.Deliveries != 1 {
		t.Fatalf("new member: %s (deliveries %d), want c", m.ID, m.Deliveries)
	}
	c2 := newClient(t, c, kgo.ConsumeTopics(s.DeadLetterTopic("orders")), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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

func TestSubscriberConformance(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	sub, err := txboxkafka.NewSubscriber(subClient(t, c), txboxkafka.SubscriberConfig{MaxRetryWait: 10 * time.Millisecond})
	testenv.Must(t, err, "subscriber")
	brokertest.TestSubscriber(t, func(t *testing.T, topic string) (txbox.Publisher, txbox.Subscriber, string) {
		admin := newClient(t, c)
		createTopics(t, admin, topic, topic+".dead")
		p, err := txboxkafka.NewPublisher(admin, txboxkafka.PublisherConfig{})
		testenv.Must(t, err, "publisher")
		return p, sub, txboxkafka.Binding(topic, "g")
	}, brokertest.SubscriberFeatures{
		MissingBinding: func(b string) string { return "missing-" + b },
		ReadDead: func(t *testing.T, binding string) []string {
			topic, _, err := txboxkafka.ParseBinding(binding)
			testenv.Must(t, err, "binding")
			var ids []string
			ds, err := reader{c: c}.Read(context.Background(), topic+".dead", 1)
			testenv.Must(t, err, "read dead")
			for _, d := range ds {
				ids = append(ids, d.ID)
			}
			return ids
		},
	})
}

func createTopics(t *testing.T, cl *kgo.Client, topics ...string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	for _, name := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 2, 1
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(context.Background(), cl)
	testenv.Must(t, err, "create topics")
	for _, rt := range resp.Topics {
		testenv.Must(t, kerr.ErrorForCode(rt.ErrorCode), "create topic %s", rt.Topic)
	}
}

// The consumer runtime settles out of order; the subscriber commits only
// the settled prefix of a partition, so an unsettled record is never
// skipped by a later record's commit.
func TestSubscriberCommitsContiguously(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	admin := newClient(t, c)
	createTopics(t, admin, "contig", "contig.dead")
	p, err := txboxkafka.NewPublisher(admin, txboxkafka.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	publish := func(ids ...string) {
		var msgs []txbox.Message
		for _, id := range ids {
			msgs = append(msgs, txbox.Message{ID: id, Topic: "contig", Key: "one-key", Payload: []byte(id)})
		}
		if errs := p.Publish(ctx, msgs); errs != nil {
			t.Fatal(errs)
		}
	}
	publish("a", "b", "c")
	sub, err := txboxkafka.NewSubscriber(subClient(t, c), txboxkafka.SubscriberConfig{})
	testenv.Must(t, err, "subscriber")
	next := func(s txbox.Subscription) txbox.Delivery {
		t.Helper()
		d, err := s.Next(ctx)
		testenv.Must(t, err, "next")
		return d
	}
	s1, err := sub.Subscribe(ctx, txboxkafka.Binding("contig", "g"), 8)
	testenv.Must(t, err, "subscribe")
	a, b, cc := next(s1), next(s1), next(s1)
	if a.Message().ID != "a" || cc.Message().ID != "c" {
		t.Fatalf("order: %s %s %s", a.Message().ID, b.Message().ID, cc.Message().ID)
	}
	testenv.Must(t, cc.Ack(ctx), "ack c")
	testenv.Must(t, b.Ack(ctx), "ack b")
	testenv.Must(t, s1.Close(ctx), "close") // a unsettled: nothing committed
	s2, err := sub.Subscribe(ctx, txboxkafka.Binding("contig", "g"), 8)
	testenv.Must(t, err, "subscribe")
	if d := next(s2); d.Message().ID != "a" {
		t.Fatalf("after closing with a unsettled, got %s, want a", d.Message().ID)
	} else {
		testenv.Must(t, d.Ack(ctx), "ack a")
	}
	testenv.Must(t, next(s2).Ack(ctx), "ack b")
	testenv.Must(t, next(s2).Ack(ctx), "ack c")
	testenv.Must(t, s2.Close(ctx), "close") // commits after c
	publish("d")
	s3, err := sub.Subscribe(ctx, txboxkafka.Binding("contig", "g"), 8)
	testenv.Must(t, err, "subscribe")
	defer func() { _ = s3.Close(ctx) }()
	if d := next(s3); d.Message().ID != "d" {
		t.Fatalf("after settling a, b, c, got %s, want d", d.Message().ID)
	}
}

// Publish does not wait out the client's linger: it flushes the client
// while it waits for its acks. A client that flushes only by hand
// (kgo.ManualFlushing, the linger without end) still has each call's
// records sent and acknowledged, with transactions and without. (A
// Publisher that does not flush waits forever: the test then fails by go
// test's -timeout.)
func TestPublishFlushes(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	for name, opts := range map[string][]kgo.Opt{
		"idempotent":    {kgo.ManualFlushing()},
		"transactional": {kgo.ManualFlushing(), kgo.TransactionalID(t.Name())},
	} {
		p, err := txboxkafka.NewPublisher(newClient(t, c, opts...), txboxkafka.PublisherConfig{Prefix: t.Name() + "."})
		testenv.Must(t, err, "%s: publisher", name)
		for round := range 3 {
			msgs := []txbox.Message{
				{ID: strconv.Itoa(round) + "a", Topic: "flush", Key: "k1", Payload: []byte("a")},
				{ID: strconv.Itoa(round) + "b", Topic: "flush", Payload: []byte("b")},
			}
			if errs := p.Publish(context.Background(), msgs); errs != nil {
				t.Fatalf("%s, round %d: %v", name, round, errs)
			}
		}
	}
}
