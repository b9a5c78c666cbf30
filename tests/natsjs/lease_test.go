package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// A subscription's lease (SubscriberConfig.Lease): a message held past
// several leases stays its holder's and is acknowledged as usual; the
// messages a subscription held when its process died (its connection
// gone: no ack, no nak) come back to the next subscription a lease later,
// although the durable's AckWait (10 minutes) never passes in the test.
func TestLeaseReturnsADeadSubscriptionsMessages(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	f := newPullFixture(t, 10*time.Minute)
	f.publish(t, ids("m", 6)...)
	subscriber := func() (*natsjs.Subscriber, *nats.Conn) {
		nc, err := nats.Connect(f.nc.ConnectedUrl())
		testenv.Must(t, err, "connect")
		t.Cleanup(nc.Close)
		sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{Lease: lease})
		testenv.Must(t, err, "subscriber")
		return sub, nc
	}
	subA, ncA := subscriber()
	a, err := subA.Subscribe(context.Background(), f.binding, 4)
	testenv.Must(t, err, "subscribe")
	first := next(t, a, 30*time.Second)
	time.Sleep(3 * lease) // held past its lease, renewed (not an assertion)
	testenv.Must(t, first.Ack(context.Background()), "ack after the renewals")
	held := next(t, a, 30*time.Second) // handed out, never settled
	if held.Message().ID != "m-1" {
		t.Fatalf("second message %s, want m-1", held.Message().ID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for f.ackPending(t) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // until a holds m-1 and has pulled more (not an assertion)
	}
	ncA.Close() // the process died

	subB, _ := subscriber()
	b, err := subB.Subscribe(context.Background(), f.binding, 8)
	testenv.Must(t, err, "subscribe again")
	defer func() { _ = b.Close(context.Background()) }()
	got := map[string]int{}
	for len(got) < 5 {
		d := next(t, b, time.Minute) // the AckWait is 10 minutes: only the lease brings them back
		m := d.Message()
		got[m.ID] = m.Deliveries
		testenv.Must(t, d.Ack(context.Background()), "ack")
	}
	for _, id := range ids("m", 6)[1:] {
		if _, ok := got[id]; !ok {
			t.Errorf("%s not delivered again; got %v", id, got)
		}
	}
	if _, ok := got["m-0"]; ok {
		t.Errorf("m-0, acknowledged after its lease was renewed, delivered again: %v", got)
	}
	if n := f.ackPending(t); n != 0 {
		t.Errorf("%d messages pending an ack, want 0", n)
	}
}

// Without a lease (negative), a dead subscription's messages wait for the
// AckWait; a lease not shorter than the AckWait is none.
func TestNoLease(t *testing.T) {
	t.Parallel()
	f := newPullFixture(t, 10*time.Minute)
	f.publish(t, "m-0")
	for _, lease := range []time.Duration{-1, 10 * time.Minute} {
		nc, err := nats.Connect(f.nc.ConnectedUrl())
		testenv.Must(t, err, "connect")
		sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{Lease: lease})
		testenv.Must(t, err, "subscriber")
		s, err := sub.Subscribe(context.Background(), f.binding, 1)
		testenv.Must(t, err, "subscribe")
		d := next(t, s, 30*time.Second)
		if x, ok := d.(txbox.DeadlineExtender); !ok || x.AckDeadline() != 10*time.Minute {
			t.Errorf("lease %v: delivery %T, want a DeadlineExtender with the AckWait", lease, d)
		}
		testenv.Must(t, d.Retry(context.Background(), 0), "retry")
		_ = s.Close(context.Background())
		nc.Close()
	}
}
