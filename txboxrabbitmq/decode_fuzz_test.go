package txboxrabbitmq

import (
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// fuzzTable builds an AMQP table from "name=value" lines, the value typed
// by its first byte as a broker or a foreign client could send it:
// 'i' int32, 'l' int64, 'b' bool, 'x' bytes, 't' a nested table, 'a' an
// array, 'n' nil, else a string.
func fuzzTable(lines string) amqp.Table {
	tab := amqp.Table{}
	for _, line := range strings.Split(lines, "\n") {
		k, v, _ := strings.Cut(line, "=")
		var val any = v
		if v != "" {
			rest := v[1:]
			n, _ := strconv.ParseInt(rest, 10, 64)
			switch v[0] {
			case 'i':
				val = int32(n)
			case 'l':
				val = n
			case 'b':
				val = rest == "true"
			case 'x':
				val = []byte(rest)
			case 't':
				val = amqp.Table{"queue": rest, "reason": "expired"}
			case 'a':
				val = []any{amqp.Table{"queue": rest, "reason": "expired"}, rest}
			case 'n':
				val = nil
			}
		}
		tab[k] = val
	}
	return tab
}

// FuzzDeliveryMessage feeds delivery.Message random AMQP deliveries:
// header tables of any value types, message_id, routing key, body,
// redelivered flag. The properties: no panic; the id is the message_id
// property and never a header's (Message-Id, message_id, Txbox-Message-Id
// in the table change nothing); only string headers reach the handler, as
// sent, and never Txbox-Deliveries or Txbox-Topic; the topic is the
// routing key or Txbox-Topic's (the copies txbox makes for retries carry
// the original topic there; which deliveries may use it is the adapters'
// trust rule, tested with the broker in tests/rabbitmq); the delivery
// count is at least 1, whatever number a Txbox-Deliveries header holds.
func FuzzDeliveryMessage(f *testing.F) {
	f.Add("trace=abc\nretries=i3", "m-1", "orders.created", []byte(`{}`), false)
	f.Add("Message-Id=forged\nmessage_id=forged\nTxbox-Message-Id=forged", "m-1", "o", []byte(nil), true)
	f.Add("Txbox-Deliveries=l9223372036854775807", "m", "o", []byte(nil), false)
	f.Add("Txbox-Deliveries=l9223372036854775807", "m", "o", []byte(nil), true)
	f.Add("Txbox-Deliveries=i-2147483648\nTxbox-Topic=elsewhere", "m", "o", []byte(nil), false)
	f.Add("Txbox-Deliveries=9223372036854775806", "m", "o", []byte(nil), true)
	f.Add("x-death=ao.retry\nTxbox-Deliveries=i4\nTxbox-Topic=x", "m", "o", []byte(nil), false)
	f.Add("Txbox-Topic=x1\nh=t\nb=btrue\nn=n\nbytes=x\xff", "", "", []byte(nil), false)
	f.Fuzz(func(t *testing.T, headers, id, routingKey string, body []byte, redelivered bool) {
		tab := fuzzTable(headers)
		d := &delivery{d: amqp.Delivery{Headers: tab, MessageId: id, RoutingKey: routingKey, Body: body, Redelivered: redelivered}, queue: "o"}
		got := d.Message()
		if got.ID != id {
			t.Fatalf("id %q, want message_id %q (headers %v)", got.ID, id, tab)
		}
		if wireTopic, _ := wire.String(tab[txbox.HeaderTopic]); got.Topic != routingKey && got.Topic != wireTopic {
			t.Fatalf("topic %q from routing key %q", got.Topic, routingKey)
		}
		if got.Deliveries < 1 {
			t.Fatalf("%d deliveries (headers %v, redelivered %v)", got.Deliveries, tab, redelivered)
		}
		if got.Binding != "o" || string(got.Payload) != string(body) {
			t.Fatalf("binding %q payload %q", got.Binding, got.Payload)
		}
		for k, v := range got.Headers {
			if k == txbox.HeaderDeliveries || k == txbox.HeaderTopic {
				t.Fatalf("header %q reached the handler", k)
			}
			if s, ok := wire.String(tab[k]); !ok || s != v { // typed values travel as text

				t.Fatalf("header %q = %q, on the wire %#v", k, v, tab[k])
			}
		}
	})
}
