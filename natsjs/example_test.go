package natsjs_test

import (
	"context"
	"fmt"
	"log"
	"strings"

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

// Check a NATS URL from the environment or a flag before connecting with
// nats.Connect(strings.Join(servers, ",")): a comma-separated list is
// checked server by server, and an error never quotes a password.
func ExampleParseURL() {
	servers, err := natsjs.ParseURL("nats://10.0.0.1:4222, 10.0.0.2:4222")
	fmt.Println(strings.Join(servers, ","), err)
	_, err = natsjs.ParseURL("nats://app:s3cret@10.0.0.1:42x22")
	fmt.Println(err)
	// Output:
	// nats://10.0.0.1:4222,nats://10.0.0.2:4222 <nil>
	// natsjs: server "nats://app:xxxxx@10.0.0.1:42x22": malformed URL: invalid port ":42x22" after host
}
