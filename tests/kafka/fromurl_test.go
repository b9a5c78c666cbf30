package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/dlq"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
)

// A Publisher from FromURL produces with a client of its own, made with
// the options given, which its Close closes.
func TestFromURLPublishesAndOwnsItsClient(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	ctx := context.Background()
	prefix := testenv.Name("fu") + "."
	url := "kafka://" + strings.Join(c.ListenAddrs(), ",")
	txn := testenv.Name("txn")
	p, err := txboxkafka.FromURL(ctx, url, txboxkafka.PublisherConfig{Prefix: prefix}, kgo.TransactionalID(txn), kgo.AllowAutoTopicCreation())
	testenv.Must(t, err, "FromURL")
	if p.TransactionalID() != txn {
		t.Fatalf("TransactionalID() = %q, want %q: the options were not applied", p.TransactionalID(), txn)
	}
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m1", Topic: "a", Payload: []byte("x")}}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	got, err := reader{c: c, prefix: prefix, committed: true}.Read(ctx, "a", 1)
	testenv.Must(t, err, "read")
	if len(got) != 1 || got[0].ID != "m1" {
		t.Fatalf("topic holds %v, want m1", got)
	}
	testenv.Must(t, p.Close(), "Close")
	if errs := p.Publish(ctx, []txbox.Message{{ID: "m2", Topic: "a", Payload: []byte("x")}}); errs == nil {
		t.Fatal("Publish after Close succeeded: the client is still open")
	}
}

// FromURL refuses a URL with credentials as invalid config, and says
// which brokers did not answer.
func TestFromURLErrors(t *testing.T) {
	t.Parallel()
	_, err := txboxkafka.FromURL(context.Background(), "kafka://u:s3cr3tQZJ@h:9092", txboxkafka.PublisherConfig{})
	if !errors.Is(err, txbox.ErrInvalidConfig) || strings.Contains(err.Error(), "s3cr3tQZJ") {
		t.Errorf("credentials: %v; want txbox.ErrInvalidConfig without the password", err)
	}
	c := cluster(t)
	addr := c.ListenAddrs()[0]
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = txboxkafka.FromURL(ctx, "kafka://"+addr, txboxkafka.PublisherConfig{})
	if err == nil || errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "connect to Kafka at kafka://"+addr) {
		t.Errorf("no broker: %v; want a connect error naming the URL", err)
	}
}

// DeadLettersFromURL reads a binding's dead letters with a client of its
// own, made with the options given, which its Close closes.
func TestDeadLettersFromURL(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("dl")
	c := cluster(t, kfake.SeedTopics(1, topic+txboxkafka.DefaultDeadLetterSuffix))
	ctx := context.Background()
	d, err := txboxkafka.DeadLettersFromURL(ctx, "kafka://"+strings.Join(c.ListenAddrs(), ","), "", kgo.AllowAutoTopicCreation())
	testenv.Must(t, err, "DeadLettersFromURL")
	binding := txboxkafka.Binding(topic, "g")
	page, err := d.List(ctx, binding, dlq.Query{})
	if err != nil || len(page.Letters) != 0 {
		t.Fatalf("List = %v, %v; want no dead letters", page.Letters, err)
	}
	testenv.Must(t, d.Close(), "Close")
	if _, err := d.List(ctx, binding, dlq.Query{}); err == nil {
		t.Fatal("List after Close succeeded: the client is still open")
	}
}
