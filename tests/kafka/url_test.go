package kafka_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
)

// The seed brokers ParseURL returns reach the cluster: a publisher on a
// client made from them delivers.
func TestParseURLConnects(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	seeds, err := txboxkafka.ParseURL("kafka://" + strings.Join(c.ListenAddrs(), ","))
	testenv.Must(t, err, "ParseURL")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.AllowAutoTopicCreation())
	testenv.Must(t, err, "kgo client")
	defer cl.Close()
	ctx := context.Background()
	testenv.Must(t, cl.Ping(ctx), "ping %q", seeds)
	pub, err := txboxkafka.NewPublisher(cl, txboxkafka.PublisherConfig{Prefix: "url."})
	testenv.Must(t, err, "publisher")
	if errs := pub.Publish(ctx, []txbox.Message{{ID: testenv.Name("id"), Topic: "orders", Payload: []byte("{}")}}); errs != nil {
		t.Fatalf("publish: %v", errs)
	}
}
