package natsjs_test

import (
	"context"
	"fmt"
	"log"

	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox/natsjs"
)

// Make the stream the relay publishes to, the durable consumer a handler
// reads from, and the Publisher and Subscriber to hand to relay.New and
// consumer.Config.Broker. It needs a NATS server with JetStream.
func ExampleNewPublisher() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	if _, err := natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: "ORDERS", Subjects: []string{"order.>"}}); err != nil {
		log.Fatal(err)
	}
	if _, err := natsjs.EnsureConsumer(ctx, nc, "ORDERS", natsjs.ConsumerConfig{Durable: "billing"}); err != nil {
		log.Fatal(err)
	}
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{}) // relay.New(ob, pub, relay.Config{})
	if err != nil {
		log.Fatal(err)
	}
	sub, err := natsjs.NewSubscriber(nc, natsjs.SubscriberConfig{}) // consumer.Config{Broker: sub}
	if err != nil {
		log.Fatal(err)
	}
	_, _ = pub, sub
}

// A handler names the durable consumer it reads by its binding.
func ExampleBinding() {
	b := natsjs.Binding("ORDERS", "billing")
	stream, durable, err := natsjs.ParseBinding(b)
	fmt.Println(b, stream, durable, err)
	// Output: ORDERS/billing ORDERS billing <nil>
}
