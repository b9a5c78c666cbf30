package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	cekafka "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxkafka"
)

// What the relay produces with CloudEventsSource set, from rows written
// with plain SQL, is read by the CloudEvents Go SDK's Kafka binding
// (kafka_sarama, over the records franz-go fetched) as the event txbox
// means: every attribute, datacontenttype from content-type whatever the
// case the writer gave Content-Type, values as they are, no extension. A
// row with its own CE_ID header (which the SDK, lower-casing header names,
// would take for ce_id) is parked dead and never produced.
func TestCloudEvents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := cluster(t)
	const source = "/shop/orders%2Fv1"
	p, err := txboxkafka.NewPublisher(newClient(t, c), txboxkafka.PublisherConfig{Prefix: "shop.", CloudEventsSource: source})
	testenv.Must(t, err, "publisher")
	// Kafka topic names are ASCII letters, digits, '.', '_' and '-'.
	rows := testenv.CERows(func(s string) string { return "ce." + strings.ReplaceAll(s, "é", "e") }, "CE_ID")
	testenv.RelayCERows(t, p, rows)
	byID := map[string]testenv.CERow{}
	var topics []string
	for _, r := range rows {
		if !r.Forged {
			byID[r.ID] = r
		}
		topics = append(topics, "shop."+r.Topic)
	}
	cl := newClient(t, c, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	identity := func(_, v string) string { return v }
	for len(byID) > 0 {
		fs := cl.PollFetches(ctx)
		testenv.Must(t, ctx.Err(), "poll")
		fs.EachRecord(func(rec *kgo.Record) {
			cm := &sarama.ConsumerMessage{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value}
			for _, h := range rec.Headers {
				cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
			}
			e, err := binding.ToEvent(ctx, cekafka.NewMessageFromConsumerMessage(cm))
			testenv.Must(t, err, "the SDK reads %v", rec.Headers)
			r, ok := byID[e.ID()]
			if !ok {
				t.Fatalf("read event %q (headers %v), not one of the rows left to read", e.ID(), rec.Headers)
			}
			delete(byID, e.ID())
			// The SDK adds the record's topic, partition and offset as
			// extensions of its own.
			for _, x := range []string{"kafkatopic", "kafkapartition", "kafkaoffset"} {
				if e.Extensions()[x] == nil {
					t.Errorf("row %q: the SDK's extension %s is missing", r.ID, x)
				}
				e.SetExtension(x, nil) // nil removes it
			}
			testenv.CheckCloudEvent(t, e, r, source, identity)
		})
	}
}

// With CloudEventsSource set, CheckMessage refuses a header named ce_* in
// any case, as a rejection wrapping txbox.ErrReservedHeader; without it,
// such a header is an ordinary one.
func TestCheckMessageReservesCloudEventsNames(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	on, err := txboxkafka.NewPublisher(newClient(t, c), txboxkafka.PublisherConfig{CloudEventsSource: "/shop"})
	testenv.Must(t, err, "publisher")
	off, err := txboxkafka.NewPublisher(newClient(t, c), txboxkafka.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	for _, name := range []string{"ce_id", "CE_ID", "Ce_Source", "ce_x"} {
		m := txbox.Message{ID: "m", Topic: "t", Headers: map[string]string{name: "v"}}
		if err := on.CheckMessage(m); !txbox.IsRejected(err) || !errors.Is(err, txbox.ErrReservedHeader) {
			t.Errorf("CloudEvents on, header %q: %v; want a rejection wrapping ErrReservedHeader", name, err)
		}
		if err := off.CheckMessage(m); err != nil {
			t.Errorf("CloudEvents off, header %q: %v", name, err)
		}
	}
}
