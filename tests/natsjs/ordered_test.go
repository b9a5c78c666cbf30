package natsjs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// TestSubscribeOrderedRestoresStreamOrder: a subscriber dies holding four
// messages whose ack deadlines it extended in another order than the
// stream's (as the consumer's keep-alive does), so the server redelivers
// them in that other order. The next ordered subscription hands them out
// in stream order all the same, before anything newer.
func TestSubscribeOrderedRestoresStreamOrder(t *testing.T) {
	t.Parallel()
	srv, nc := privateNATS(t)
	ctx := context.Background()
	_, err := natsjs.EnsureConsumer(ctx, nc, "BIG", natsjs.ConsumerConfig{Durable: "ord", FilterSubjects: []string{"big.ord"}, AckWait: time.Second})
	testenv.Must(t, err, "durable")
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	publish := func(id string) {
		_, err := js.Publish(ctx, "big.ord", []byte(id), jetstream.WithMsgID(id))
		testenv.Must(t, err, "publish %s", id)
	}
	for i := 1; i <= 4; i++ {
		publish(fmt.Sprintf("m%d", i))
	}

	// The first subscriber, on a connection of its own that it "dies" with.
	ncA, err := srv.Connect()
	testenv.Must(t, err, "connect A")
	subA, err := natsjs.NewSubscriber(ncA, natsjs.SubscriberConfig{})
	testenv.Must(t, err, "subscriber A")
	a, err := subA.SubscribeOrdered(ctx, "BIG/ord", 8)
	testenv.Must(t, err, "subscribe A")
	var held []txbox.Delivery
	for range 4 {
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := a.Next(nctx)
		cancel()
		testenv.Must(t, err, "A next")
		held = append(held, d)
	}
	// Extend m2, m3, m4, then m1: their deadlines now run out in that order.
	for _, i := range []int{1, 2, 3, 0} {
		x, ok := held[i].(txbox.DeadlineExtender)
		if !ok {
			t.Fatal("a natsjs delivery is not a txbox.DeadlineExtender")
		}
		testenv.Must(t, x.ExtendDeadline(ctx), "extend %s", held[i].Message().ID)
		time.Sleep(200 * time.Millisecond)
	}
	ncA.Close() // killed: no ack, no nak
	publish("m5")

	ncB, err := srv.Connect()
	testenv.Must(t, err, "connect B")
	t.Cleanup(ncB.Close)
	subB, err := natsjs.NewSubscriber(ncB, natsjs.SubscriberConfig{})
	testenv.Must(t, err, "subscriber B")
	b, err := subB.SubscribeOrdered(ctx, "BIG/ord", 8)
	testenv.Must(t, err, "subscribe B")
	defer b.Close(ctx)
	var got []string
	for range 5 {
		nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		d, err := b.Next(nctx)
		cancel()
		testenv.Must(t, err, "B next (got %v)", got)
		got = append(got, d.Message().ID)
		testenv.Must(t, d.Ack(ctx), "ack")
	}
	if fmt.Sprint(got) != "[m1 m2 m3 m4 m5]" {
		t.Fatalf("the restarted ordered subscription handed out %v, want [m1 m2 m3 m4 m5]", got)
	}
}
