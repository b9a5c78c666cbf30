package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
)

// With no broker and no stream named, the embedded server gets the stream
// TXBOX capturing txbox.>, and topics get the prefix txbox.
func TestEmbeddedDefaultStream(t *testing.T) {
	f := brokerFlags{natsListen: DefaultNATSListen}
	if err := f.check(); err != nil {
		t.Fatal(err)
	}
	if f.stream != DefaultStream || f.streamSubjects != "txbox.>" || f.subjectPrefix != "txbox." {
		t.Fatalf("defaults: stream %q subjects %q prefix %q", f.stream, f.streamSubjects, f.subjectPrefix)
	}
	f = brokerFlags{natsListen: DefaultNATSListen, subjectPrefix: "shop."}
	if err := f.check(); err != nil || f.streamSubjects != "shop.>" {
		t.Fatalf("prefix shop.: subjects %q, err %v", f.streamSubjects, err)
	}
}

// A stream that exists and does not capture every --stream-subjects value
// is used as it is, with a warning naming the subjects it lacks; subjects
// it captures through a wildcard are not named.
func TestExistingStreamLacksSubjects(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t)
	p := testenv.Subject()
	name := strings.ToUpper(testenv.Name("LACK"))
	ctx := context.Background()
	t.Cleanup(func() {
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(context.Background(), name)
		}
	})
	var out strings.Builder
	f := &brokerFlags{stream: name, streamSubjects: p + "a.>," + p + "b.*"}
	if err := ensureStream(ctx, nc, f, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "warning") {
		t.Fatalf("creating the stream warned:\n%s", out.String())
	}
	out.Reset()
	f.streamSubjects = p + "a.x.>," + p + "b.*," + p + "b.>," + p + "c"
	if err := ensureStream(ctx, nc, f, &out); err != nil {
		t.Fatal(err)
	}
	want := "warning: stream " + name + " already exists and does not capture " + p + "b.>, " + p + "c of --stream-subjects"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}
}

// redis://, asynq+redis:// and kafka:// open a publisher that delivers.
func TestOtherBrokers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", err)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "cli.orders"))
	testenv.Must(t, err, "kfake")
	t.Cleanup(kc.Close)

	prefix := testenv.Name("txcli") + ":"
	queue := testenv.Name("txcli")
	t.Cleanup(func() {
		for _, pattern := range []string{prefix + "*", "asynq:{" + queue + "}*"} {
			keys, _ := rdb.Keys(ctx, pattern).Result()
			if len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
		}
		rdb.SRem(ctx, "asynq:queues", queue)
	})
	for _, c := range []struct {
		url, prefix string
		check       func(t *testing.T)
	}{
		{"redis://127.0.0.1:6379/0?maxlen=100", prefix, func(t *testing.T) {
			if n, err := rdb.XLen(ctx, prefix+"orders").Result(); err != nil || n != 1 {
				t.Fatalf("stream length %d, %v", n, err)
			}
		}},
		{"asynq+redis://127.0.0.1:6379/0?queue=" + queue, "", func(t *testing.T) {
			if n, err := rdb.LLen(ctx, "asynq:{"+queue+"}:pending").Result(); err != nil || n != 1 {
				t.Fatalf("pending tasks %d, %v", n, err)
			}
		}},
		{"kafka://" + strings.Join(kc.ListenAddrs(), ","), "cli.", func(t *testing.T) {}},
	} {
		t.Run(c.url[:strings.Index(c.url, ":")], func(t *testing.T) {
			f := brokerFlags{url: c.url, subjectPrefix: c.prefix, natsListen: DefaultNATSListen}
			testenv.Must(t, f.check(), "check")
			var out strings.Builder
			b, err := openBroker(ctx, &f, &out)
			testenv.Must(t, err, "open %s", c.url)
			defer b.Close()
			if errs := b.pub.Publish(ctx, []txbox.Message{{ID: testenv.Name("id"), Topic: "orders", Payload: []byte("{}")}}); errs != nil {
				t.Fatalf("publish: %v", errs)
			}
			c.check(t)
		})
	}
	bad := brokerFlags{url: "redis://127.0.0.1:6379/0?maxlen=-1"}
	if err := bad.check(); err == nil || !strings.Contains(err.Error(), "maxlen") {
		t.Fatalf("maxlen=-1: check returned %v, want an error naming maxlen", err)
	}
	if err := (&brokerFlags{url: "mqtt://x"}).check(); err == nil {
		t.Fatal("mqtt:// accepted")
	}
}

// --kafka-transactional-id makes a transactional publisher: each Publish
// call is one transaction, committed before it returns, which a
// read_committed consumer sees.
func TestKafkaTransactionalID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "cli.orders"))
	testenv.Must(t, err, "kfake")
	t.Cleanup(kc.Close)
	id := testenv.Name("relay")
	f := brokerFlags{url: "kafka://" + strings.Join(kc.ListenAddrs(), ","), subjectPrefix: "cli.", natsListen: DefaultNATSListen, kafkaTxnID: id}
	testenv.Must(t, f.check(), "check")
	var out strings.Builder
	b, err := openBroker(ctx, &f, &out)
	testenv.Must(t, err, "open")
	defer b.Close()
	if want := "transactional id " + id; !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q: %s", want, out.String())
	}
	pub := b.pub
	if kp, ok := pub.(*txboxkafka.Publisher); !ok || kp.TransactionalID() != id {
		t.Fatalf("publisher %T is not transactional with id %s", pub, id)
	}
	if errs := pub.Publish(ctx, []txbox.Message{{ID: "m1", Topic: "orders", Payload: []byte("{}")}}); errs != nil {
		t.Fatalf("publish: %v", errs)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("cli.orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	testenv.Must(t, err, "reader")
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fs := cl.PollFetches(rctx)
	testenv.Must(t, rctx.Err(), "read_committed poll")
	if n := fs.NumRecords(); n != 1 {
		t.Fatalf("read_committed: %d records, want 1", n)
	}
}

// The embedded server on a port another process holds is refused, with
// the hint to use the server that may run there.
func TestEmbeddedNATSBusyPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	defer l.Close()
	f := brokerFlags{natsListen: l.Addr().String(), natsDir: t.TempDir()}
	testenv.Must(t, f.check(), "check")
	b, err := openBroker(context.Background(), &f, io.Discard)
	if err == nil {
		b.Close()
		t.Fatal("the embedded server started on a busy port")
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "use it with --broker nats://"+l.Addr().String()) {
		t.Fatalf("busy port: %v; want EADDRINUSE and the hint", err)
	}
}
