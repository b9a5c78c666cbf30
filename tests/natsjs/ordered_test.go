package natsjs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsembed"
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
	o := holdFour(t)
	// Extend m2, m3, m4, then m1: their deadlines now run out in that order.
	for _, i := range []int{1, 2, 3, 0} {
		o.extend(i)
		time.Sleep(200 * time.Millisecond)
	}
	o.ncA.Close() // killed: no ack, no nak
	o.publish("m5")
	got, err := o.restart()
	testenv.Must(t, err, "restart")
	if got != "[m1 m2 m3 m4 m5]" {
		t.Fatalf("the restarted ordered subscription handed out %s, want [m1 m2 m3 m4 m5]", got)
	}
}

// TestSubscribeOrderedWaitsForALateRedelivery: the first subscriber keeps
// m1 alive past the next subscription's hold (a server whose ack timers
// run late does the same), so m2..m4 come back and m5 is delivered before
// m1 is. The next subscription waits for m1 all the same (the consumer
// still has it pending) and hands out m1..m5 in stream order.
func TestSubscribeOrderedWaitsForALateRedelivery(t *testing.T) {
	t.Parallel()
	o := holdFour(t)
	// The first subscriber pulls no more (so m5 is not its) and keeps its
	// connection, on which it extends m1 only.
	testenv.Must(t, o.a.Close(context.Background()), "close A")
	o.publish("m5")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the first subscriber, alive, extends m1 only, then dies
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				o.ncA.Close()
				return
			case <-tick.C:
				_ = o.held[0].(txbox.DeadlineExtender).ExtendDeadline(context.Background())
			}
		}
	}()
	type result struct {
		got string
		err error
	}
	restarted := make(chan result, 1)
	go func() {
		got, err := o.restart()
		restarted <- result{got, err}
	}()
	// m1 is kept alive until m5, never delivered before, was delivered to
	// the next subscription (after m2..m4 came back to it).
	testenv.Await(t, "m5 delivered", func() (bool, string) {
		info, err := o.cons.Info(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return info.Delivered.Stream >= 5, fmt.Sprintf("delivered up to %d, %d redelivered", info.Delivered.Stream, info.NumRedelivered)
	})
	close(stop)
	<-done
	r := <-restarted
	testenv.Must(t, r.err, "restart")
	if r.got != "[m1 m2 m3 m4 m5]" {
		t.Fatalf("the restarted ordered subscription handed out %s, want [m1 m2 m3 m4 m5]", r.got)
	}
}

// ordered is a durable "ord" on a private server and the first subscriber,
// holding m1..m4 unacknowledged.
type ordered struct {
	t    *testing.T
	srv  *natsembed.Server
	js   jetstream.JetStream
	cons jetstream.Consumer
	ncA  *nats.Conn
	a    txbox.Subscription
	held []txbox.Delivery
}

func holdFour(t *testing.T) *ordered {
	t.Helper()
	srv, nc := privateNATS(t)
	ctx := context.Background()
	_, err := natsjs.EnsureConsumer(ctx, nc, "BIG", natsjs.ConsumerConfig{Durable: "ord", FilterSubjects: []string{"big.ord"}, AckWait: time.Second})
	testenv.Must(t, err, "durable")
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	cons, err := js.Consumer(ctx, "BIG", "ord")
	testenv.Must(t, err, "consumer")
	o := &ordered{t: t, srv: srv, js: js, cons: cons}
	for i := 1; i <= 4; i++ {
		o.publish(fmt.Sprintf("m%d", i))
	}
	// The first subscriber, on a connection of its own that it "dies" with.
	o.ncA, err = srv.Connect()
	testenv.Must(t, err, "connect A")
	subA, err := natsjs.NewSubscriber(o.ncA, natsjs.SubscriberConfig{})
	testenv.Must(t, err, "subscriber A")
	o.a, err = subA.SubscribeOrdered(ctx, "BIG/ord", 8)
	testenv.Must(t, err, "subscribe A")
	for range 4 {
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := o.a.Next(nctx)
		cancel()
		testenv.Must(t, err, "A next")
		o.held = append(o.held, d)
	}
	return o
}

func (o *ordered) publish(id string) {
	o.t.Helper()
	_, err := o.js.Publish(context.Background(), "big.ord", []byte(id), jetstream.WithMsgID(id))
	testenv.Must(o.t, err, "publish %s", id)
}

// extend extends the ack deadline of the i-th message held.
func (o *ordered) extend(i int) {
	o.t.Helper()
	x, ok := o.held[i].(txbox.DeadlineExtender)
	if !ok {
		o.t.Fatal("a natsjs delivery is not a txbox.DeadlineExtender")
	}
	testenv.Must(o.t, x.ExtendDeadline(context.Background()), "extend %s", o.held[i].Message().ID)
}

// restart subscribes again, ordered, and returns the ids of the first five
// messages it hands out.
func (o *ordered) restart() (string, error) {
	ctx := context.Background()
	ncB, err := o.srv.Connect()
	if err != nil {
		return "", err
	}
	o.t.Cleanup(ncB.Close)
	subB, err := natsjs.NewSubscriber(ncB, natsjs.SubscriberConfig{})
	if err != nil {
		return "", err
	}
	b, err := subB.SubscribeOrdered(ctx, "BIG/ord", 8)
	if err != nil {
		return "", err
	}
	defer b.Close(ctx)
	var got []string
	for range 5 {
		d, err := b.Next(ctx)
		if err != nil {
			return "", fmt.Errorf("B next (got %v): %w", got, err)
		}
		got = append(got, d.Message().ID)
		if err := d.Ack(ctx); err != nil {
			return "", err
		}
	}
	return fmt.Sprint(got), nil
}
