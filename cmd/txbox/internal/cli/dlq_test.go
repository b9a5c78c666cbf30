package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/redisstream"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
	"github.com/txbox/txbox/txboxrabbitmq"
)

// dlqBroker is a binding on a real broker with a publisher and subscriber,
// and the txbox dlq flags that name it.
type dlqBroker struct {
	pub   txbox.Publisher
	sub   txbox.Subscriber
	topic string
	flags []string // --broker, --binding and the dead-letter names
}

func dlqBrokers(t *testing.T, kind string) dlqBroker {
	ctx := context.Background()
	switch kind {
	case "nats":
		nc := testenv.NATS(t)
		prefix := testenv.Subject()
		stream := strings.ToUpper(testenv.Name("DLQ"))
		js, err := jetstream.New(nc)
		testenv.Must(t, err, "jetstream")
		for name, subj := range map[string]string{stream: prefix + "ev.>", stream + "_DL": prefix + "dlq.>"} {
			_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: name, Subjects: []string{subj}})
			testenv.Must(t, err, "stream %s", name)
			t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
		}
		_, err = natsjs.EnsureConsumer(ctx, nc, stream, natsjs.ConsumerConfig{Durable: "shipping"})
		testenv.Must(t, err, "durable")
		pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: prefix})
		testenv.Must(t, err, "publisher")
		sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{DeadLetterPrefix: prefix + "dlq."})
		testenv.Must(t, err, "subscriber")
		return dlqBroker{pub: pub, sub: sub, topic: "ev.orders",
			flags: []string{"--broker", testenv.NATSURL(), "--binding", natsjs.Binding(stream, "shipping"), "--dead-letter-prefix", prefix + "dlq."}}
	case "redis":
		rdb := testenv.Redis(t)
		prefix := testenv.Name("txdlq") + ":"
		testenv.DeleteKeys(t, rdb, prefix+"*")
		testenv.Must(t, redisstream.EnsureGroup(ctx, rdb, prefix+"orders", "shipping", "0"), "group")
		pub, err := redisstream.NewPublisher(rdb, redisstream.PublisherConfig{Prefix: prefix})
		testenv.Must(t, err, "publisher")
		sub, err := redisstream.NewSubscriber(rdb, redisstream.SubscriberConfig{Consumer: "c", Block: 50 * time.Millisecond})
		testenv.Must(t, err, "subscriber")
		return dlqBroker{pub: pub, sub: sub, topic: "orders",
			flags: []string{"--broker", testenv.RedisURL(), "--binding", redisstream.Binding(prefix+"orders", "shipping")}}
	case "kafka":
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "orders.dead"))
		testenv.Must(t, err, "kfake")
		t.Cleanup(kc.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.FetchMaxWait(50*time.Millisecond))
		testenv.Must(t, err, "kgo client")
		t.Cleanup(cl.Close)
		pub, err := txboxkafka.NewPublisher(cl, txboxkafka.PublisherConfig{})
		testenv.Must(t, err, "publisher")
		sub, err := txboxkafka.NewSubscriber(cl, txboxkafka.SubscriberConfig{})
		testenv.Must(t, err, "subscriber")
		return dlqBroker{pub: pub, sub: sub, topic: "orders",
			flags: []string{"--broker", "kafka://" + strings.Join(kc.ListenAddrs(), ","), "--binding", txboxkafka.Binding("orders", "shipping")}}
	}
	url := testenv.RabbitMQ(t)
	conn := testenv.RabbitMQConn(t, url)
	q := testenv.Name("txdlq")
	testenv.Must(t, txboxrabbitmq.DeclareQueue(ctx, conn, txboxrabbitmq.QueueConfig{Name: q}), "declare")
	t.Cleanup(func() {
		c, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return
		}
		for _, n := range []string{q, q + ".retry", q + ".dlq"} {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
		_ = ch.ExchangeDelete(q+".dlx", false, false)
	})
	pub, err := txboxrabbitmq.NewPublisher(conn, txboxrabbitmq.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	t.Cleanup(func() { _ = pub.Close() })
	sub, err := txboxrabbitmq.NewSubscriber(conn, txboxrabbitmq.SubscriberConfig{})
	testenv.Must(t, err, "subscriber")
	return dlqBroker{pub: pub, sub: sub, topic: q, flags: []string{"--broker", url, "--binding", q}}
}

// TestDLQCommands, on JetStream, RabbitMQ, Redis and Kafka (kfake): two messages are
// dead-lettered by the subscriber; txbox dlq list shows them with their
// error, show prints one escaped, a redrive by --error with --dry-run
// changes nothing, without --yes off a terminal is refused, with --yes
// sends the chosen one back, which the binding receives with its original
// message id; discard removes the other.
func TestDLQCommands(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"nats", "rabbitmq", "redis", "kafka"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			b := dlqBrokers(t, kind)
			binding := b.flags[3]
			msgs := []txbox.Message{
				{ID: "m-timeout", Topic: b.topic, Key: "k1", Payload: []byte("order 1\x1b[31m")},
				{ID: "m-refused", Topic: b.topic, Key: "k2", Payload: []byte("order 2")},
			}
			for _, err := range b.pub.Publish(ctx, msgs) {
				testenv.Must(t, err, "publish")
			}
			s, err := b.sub.Subscribe(ctx, binding, 4)
			testenv.Must(t, err, "subscribe")
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			for range msgs {
				d, err := s.Next(ctx)
				testenv.Must(t, err, "next")
				cause := errors.New("connection refused")
				if d.Message().ID == "m-timeout" {
					cause = errors.New("timeout\x1b]0;evil\a talking to billing")
				}
				testenv.Must(t, d.DeadLetter(ctx, cause), "dead-letter")
			}
			dlq := func(args ...string) string {
				return mustRun(t, append(append([]string{"dlq"}, args...), b.flags...)...)
			}

			out := dlq("list")
			for _, want := range []string{"m-timeout", "m-refused", `timeout\x1b]0;evil\a talking to billing`, "connection refused"} {
				if !strings.Contains(out, want) {
					t.Fatalf("dlq list lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "\x1b") || strings.Contains(out, "cut at") {
				t.Fatalf("dlq list printed a raw escape or says it was cut:\n%q", out)
			}
			if out := dlq("list", "--limit", "1"); !strings.Contains(out, "cut at --limit 1") {
				t.Fatalf("a list cut at 1 of 2 does not say so:\n%s", out)
			}
			var page struct {
				Letters []struct {
					Ref        string `json:"ref"`
					ID         string `json:"message_id"`
					Error      string `json:"error"`
					Deliveries int    `json:"deliveries"`
				} `json:"letters"`
				More bool `json:"more"`
			}
			testenv.Must(t, json.Unmarshal([]byte(dlq("list", "--json", "--error", "timeout")), &page), "list --json")
			if len(page.Letters) != 1 || page.More || page.Letters[0].ID != "m-timeout" || page.Letters[0].Deliveries != 1 {
				t.Fatalf("list --error timeout --json = %+v, want m-timeout alone, delivered once", page)
			}
			one := page.Letters[0]
			show := dlq("show", one.Ref)
			for _, want := range []string{"message id  m-timeout", `order 1\x1b[31m`, "key         k1"} {
				if !strings.Contains(show, want) {
					t.Fatalf("dlq show lacks %q:\n%s", want, show)
				}
			}

			dry := dlq("redrive", "--error", "timeout", "--dry-run")
			if !strings.Contains(dry, "would redrive 1 dead letter(s)") || !strings.Contains(dry, "m-timeout") || strings.Contains(dry, "m-refused") {
				t.Fatalf("dry run:\n%s", dry)
			}
			if _, _, err := run(ctx, append([]string{"dlq", "redrive", "--error", "timeout"}, b.flags...)...); err == nil || !strings.Contains(err.Error(), "--yes") {
				t.Fatalf("a bulk redrive off a terminal without --yes: %v, want a refusal naming --yes", err)
			}
			if out := dlq("list"); !strings.Contains(out, "m-timeout") {
				t.Fatalf("the dry run or the refused redrive changed something:\n%s", out)
			}
			if out := dlq("redrive", "--error", "timeout", "--yes"); !strings.Contains(out, "redrove 1 dead letter(s)") {
				t.Fatalf("redrive:\n%s", out)
			}
			d, err := s.Next(ctx)
			testenv.Must(t, err, "next after the redrive")
			if m := d.Message(); m.ID != "m-timeout" || string(m.Payload) != "order 1\x1b[31m" || m.Deliveries != 1 {
				t.Fatalf("redriven delivery = id %q payload %q deliveries %d, want m-timeout, its payload, 1", m.ID, m.Payload, m.Deliveries)
			}
			testenv.Must(t, d.Ack(ctx), "ack")
			out = dlq("list")
			if strings.Contains(out, "m-timeout") || !strings.Contains(out, "m-refused") {
				t.Fatalf("after the redrive:\n%s", out)
			}
			if out := dlq("discard", "--all", "--yes"); !strings.Contains(out, "discarded 1 dead letter(s)") {
				t.Fatalf("discard:\n%s", out)
			}
			if out := dlq("list"); !strings.Contains(out, "no dead letters") {
				t.Fatalf("after the discard:\n%s", out)
			}
		})
	}
}

// txbox dlq reads the relay's --broker (TXBOX_BROKER) as the relay does,
// through the adapters' ParseURL: a redis:// URL with the publisher's
// maxlen=N and a go-redis option opens; a password is never printed, in
// the errors of an unreachable Redis or of a Kafka URL that takes none.
func TestDLQBrokerURLs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := dlqBrokers(t, "redis")
	sep := "?"
	if strings.Contains(testenv.RedisURL(), "?") {
		sep = "&"
	}
	flags := slices.Clone(b.flags)
	flags[1] = testenv.RedisURL() + sep + "maxlen=1000&dial_timeout=3s"
	if out := mustRun(t, append([]string{"dlq", "list"}, flags...)...); !strings.Contains(out, "no dead letters") {
		t.Fatalf("dlq list --broker %s:\n%s", flags[1], out)
	}
	const pw = "s3cret-pw"
	for _, broker := range []string{
		"redis://user:" + pw + "@127.0.0.1:1/0?maxlen=5",
		"redis://user:" + pw + "@127.0.0.1:6379/0?maxlen=-1",
		"redis://user:" + pw + "@127.0.0.1:6379/0?no_such_option=1",
		"kafka://user:" + pw + "@127.0.0.1:9092",
	} {
		out, errOut, err := run(ctx, "dlq", "list", "--broker", broker, "--binding", "orders/shipping")
		if err == nil {
			t.Errorf("dlq list --broker %s succeeded:\n%s", broker, out)
			continue
		}
		if strings.Contains(err.Error()+out+errOut, pw) {
			t.Errorf("dlq list --broker %s printed the password: %v\n%s%s", broker, err, out, errOut)
		}
	}
}
