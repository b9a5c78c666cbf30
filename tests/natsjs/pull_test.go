package natsjs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// pullFixture is a stream of the test's own with a durable "d" of the given
// AckWait, a publisher and a subscriber on it.
type pullFixture struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string
	pub     *natsjs.Publisher
	sub     *natsjs.Subscriber
	binding string
}

func newPullFixture(t *testing.T, ackWait time.Duration) *pullFixture {
	t.Helper()
	nc := testenv.NATS(t)
	ctx := context.Background()
	prefix := testenv.Subject()
	f := &pullFixture{nc: nc, stream: strings.ToUpper(testenv.Name("PULL")), subject: prefix + "ev.orders"}
	f.js, _ = jetstream.New(nc)
	_, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: f.stream, Subjects: []string{prefix + "ev.>"}})
	testenv.Must(t, err, "stream")
	t.Cleanup(func() { _ = f.js.DeleteStream(context.Background(), f.stream) })
	_, err = natsjs.EnsureConsumer(ctx, nc, f.stream, natsjs.ConsumerConfig{Durable: "d", AckWait: ackWait})
	testenv.Must(t, err, "consumer")
	f.pub = newPublisher(t, nc, natsjs.PublisherConfig{})
	f.sub, err = natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{})
	testenv.Must(t, err, "subscriber")
	f.binding = natsjs.Binding(f.stream, "d")
	return f
}

func (f *pullFixture) publish(t *testing.T, ids ...string) {
	t.Helper()
	var msgs []txbox.Message
	for _, id := range ids {
		msgs = append(msgs, txbox.Message{ID: id, Topic: f.subject, Payload: []byte("x")})
	}
	for i, err := range f.pub.Publish(context.Background(), msgs) {
		testenv.Must(t, err, "publish %s", ids[i])
	}
}

func (f *pullFixture) ackPending(t *testing.T) int {
	t.Helper()
	c, err := f.js.Consumer(context.Background(), f.stream, "d")
	testenv.Must(t, err, "consumer")
	info, err := c.Info(context.Background())
	testenv.Must(t, err, "consumer info")
	return info.NumAckPending
}

func next(t *testing.T, s txbox.Subscription, within time.Duration) txbox.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		d, err := s.Next(ctx)
		if err == nil {
			return d
		}
		if ctx.Err() != nil {
			t.Fatalf("no message within %v: %v", within, err)
		}
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// Messages a subscription pulled ahead of Next are kept alive while they
// wait: taken three AckWaits after they arrived, none was redelivered.
// And a subscription holds no more than its prefetch ahead of Next.
func TestPulledMessagesAreKeptAlive(t *testing.T) {
	t.Parallel()
	const ackWait, prefetch = 2 * time.Second, 4
	f := newPullFixture(t, ackWait)
	f.publish(t, ids("m", 12)...)
	s, err := f.sub.Subscribe(context.Background(), f.binding, prefetch)
	testenv.Must(t, err, "subscribe")
	defer func() { _ = s.Close(context.Background()) }()
	first := next(t, s, 30*time.Second)
	testenv.Must(t, first.Ack(context.Background()), "ack")
	for range 3 {
		time.Sleep(ackWait) // the messages pulled behind it wait (not an assertion)
		if n := f.ackPending(t); n > prefetch {
			t.Errorf("%d messages pending an ack at the server, want at most the prefetch (%d)", n, prefetch)
		}
	}
	for i := 1; i < 12; i++ {
		d := next(t, s, 30*time.Second)
		m := d.Message()
		if want := fmt.Sprintf("m-%d", i); m.ID != want || m.Deliveries != 1 {
			t.Errorf("message %d: %s, delivery %d; want %s, delivery 1 (not redelivered while it waited)", i, m.ID, m.Deliveries, want)
		}
		testenv.Must(t, d.Ack(context.Background()), "ack")
	}
}

// Close gives back the messages pulled and not handed out (a nak): another
// subscription gets them at once, not after the AckWait.
func TestCloseGivesPulledMessagesBack(t *testing.T) {
	t.Parallel()
	const ackWait = time.Minute
	f := newPullFixture(t, ackWait)
	f.publish(t, ids("m", 5)...)
	s, err := f.sub.Subscribe(context.Background(), f.binding, 8)
	testenv.Must(t, err, "subscribe")
	d := next(t, s, 30*time.Second)
	testenv.Must(t, d.Ack(context.Background()), "ack")
	deadline := time.Now().Add(30 * time.Second)
	for f.ackPending(t) < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // until the other four are pulled
	}
	testenv.Must(t, s.Close(context.Background()), "close")
	s2, err := f.sub.Subscribe(context.Background(), f.binding, 8)
	testenv.Must(t, err, "subscribe again")
	defer func() { _ = s2.Close(context.Background()) }()
	got := map[string]bool{}
	for range 4 {
		d := next(t, s2, ackWait/2) // well before the AckWait would redeliver them
		got[d.Message().ID] = true
		testenv.Must(t, d.Ack(context.Background()), "ack")
	}
	for _, id := range ids("m", 5)[1:] {
		if !got[id] {
			t.Errorf("%s not handed to the next subscription; got %v", id, got)
		}
	}
}

// A durable deleted and created again under a subscription: Next reports
// the failed pull, and the subscription goes on with the new durable.
func TestPullSurvivesDurableRecreated(t *testing.T) {
	t.Parallel()
	f := newPullFixture(t, 5*time.Second)
	f.publish(t, "before")
	s, err := f.sub.Subscribe(context.Background(), f.binding, 4)
	testenv.Must(t, err, "subscribe")
	defer func() { _ = s.Close(context.Background()) }()
	d := next(t, s, 30*time.Second)
	testenv.Must(t, d.Ack(context.Background()), "ack")
	ctx := context.Background()
	testenv.Must(t, f.js.DeleteConsumer(ctx, f.stream, "d"), "delete the durable")
	_, err = natsjs.EnsureConsumer(ctx, f.nc, f.stream, natsjs.ConsumerConfig{Durable: "d", AckWait: 5 * time.Second})
	testenv.Must(t, err, "create it again")
	f.publish(t, "after")
	seen := map[string]bool{}
	for !seen["after"] {
		d := next(t, s, 60*time.Second) // the new durable starts at the stream's start
		seen[d.Message().ID] = true
		testenv.Must(t, d.Ack(context.Background()), "ack")
	}
}

// The prefetch bounds the messages a subscription holds unacknowledged,
// those handed out and not settled included (what a killed consumer
// strands until AckWait): with the prefetch's worth taken and held, the
// server has no more pending an ack; once they are settled, the next ones
// come.
func TestPrefetchCountsUnsettledMessages(t *testing.T) {
	t.Parallel()
	const prefetch = 4
	f := newPullFixture(t, time.Minute)
	f.publish(t, ids("m", 3*prefetch)...)
	s, err := f.sub.Subscribe(context.Background(), f.binding, prefetch)
	testenv.Must(t, err, "subscribe")
	defer func() { _ = s.Close(context.Background()) }()
	var held []txbox.Delivery
	for range prefetch {
		held = append(held, next(t, s, 30*time.Second))
	}
	// Until the count at the server has not moved for a second: a
	// subscription that pulls more does it right after Next made room.
	last, still := f.ackPending(t), 0
	for still < 10 {
		time.Sleep(100 * time.Millisecond)
		if n := f.ackPending(t); n != last {
			last, still = n, 0
		} else {
			still++
		}
	}
	if last > prefetch {
		t.Errorf("%d messages pending an ack with %d handed out and unsettled, want at most the prefetch (%d)", last, prefetch, prefetch)
	}
	for i, d := range held {
		if i%2 == 0 {
			testenv.Must(t, d.Ack(context.Background()), "ack")
		} else {
			testenv.Must(t, d.Retry(context.Background(), 0), "retry")
		}
	}
	got := map[string]bool{}
	for len(got) < 3*prefetch-prefetch/2 {
		d := next(t, s, 30*time.Second)
		got[d.Message().ID] = true
		testenv.Must(t, d.Ack(context.Background()), "ack")
	}
}
