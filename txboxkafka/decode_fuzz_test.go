package txboxkafka

import (
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
)

// FuzzDeliveryMessage feeds delivery.Message random Kafka records: headers
// as "name=value" lines (repeats allowed), key, value, topic. The
// properties: no panic; the id is a Txbox-Message-Id header's value (Kafka
// has no id field; txbox reserves that name, so no user header carries it)
// and never another header's; Txbox-Message-Id and Txbox-Deliveries never
// reach the handler; the delivery count is at least 1 whatever
// Txbox-Deliveries says; topic, key and payload are the record's; each
// other header arrives with a value it had on the wire.
func FuzzDeliveryMessage(f *testing.F) {
	f.Add("Txbox-Message-Id=m-1\ntrace=abc", "orders", []byte("k"), []byte(`{}`))
	f.Add("Message-Id=forged\nmessage_id=forged\ntxbox-message-id=lower", "o", []byte(nil), []byte(nil))
	f.Add("Txbox-Message-Id=a\nTxbox-Message-Id=b", "o", []byte(nil), []byte(nil))
	f.Add("Txbox-Deliveries=9223372036854775807\nTxbox-Deliveries=-1", "o", []byte(nil), []byte(nil))
	f.Add("Txbox-Deliveries=0\nTxbox-Topic=elsewhere\nTxbox-Binding=b", "o", []byte("\xff"), []byte(nil))
	f.Add("=\na=1\na=2", "", []byte(nil), []byte(nil))
	f.Fuzz(func(t *testing.T, headers, topic string, key, value []byte) {
		r := &kgo.Record{Topic: topic, Key: key, Value: value}
		wire := map[string][]string{}
		for _, line := range strings.Split(headers, "\n") {
			k, v, _ := strings.Cut(line, "=")
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			wire[k] = append(wire[k], v)
		}
		got := (&delivery{sub: &subscription{binding: "b"}, r: r}).Message()
		if ids := wire[txbox.HeaderMessageID]; len(ids) == 0 && got.ID != "" || len(ids) > 0 && !slices.Contains(ids, got.ID) {
			t.Fatalf("id %q, Txbox-Message-Id on the wire %q", got.ID, ids)
		}
		if got.Deliveries < 1 {
			t.Fatalf("%d deliveries (headers %q)", got.Deliveries, wire)
		}
		if got.Topic != topic || got.Key != string(key) || string(got.Payload) != string(value) || got.Binding != "b" {
			t.Fatalf("topic %q key %q payload %q binding %q", got.Topic, got.Key, got.Payload, got.Binding)
		}
		for k, v := range got.Headers {
			if k == txbox.HeaderMessageID || k == txbox.HeaderDeliveries {
				t.Fatalf("header %q reached the handler", k)
			}
			if !slices.Contains(wire[k], v) {
				t.Fatalf("header %q = %q, on the wire %q", k, v, wire[k])
			}
		}
	})
}
