package redisstream

import (
	"maps"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// FuzzEntry feeds the decoding of a stream entry (reader.entry, then
// delivery.Message) random fields, given as "name=value" lines, and any
// delivery count from XPENDING. The properties: no panic; the id is the
// "id" field's and nothing else (an "h:id" or "h:Message-Id" header
// leaves it alone); the topic is the stream; the delivery count is the
// broker's, whatever Txbox-* fields the entry holds; every "h:" field is a
// header of the same value and no other field is. And a valid message
// written by Values reads back unchanged.
func FuzzEntry(f *testing.F) {
	f.Add("id=m-1\nkey=k\npayload={}\nh:trace=abc", int64(1))
	f.Add("id=m-1\nh:id=forged\nh:Message-Id=forged\nh:Txbox-Message-Id=forged", int64(2))
	f.Add("h:Txbox-Deliveries=99\nh:Txbox-Topic=elsewhere\nid=m", int64(1))
	f.Add("h:=empty name\nh:h:=nested\n=\nid=", int64(0))
	f.Add("payload=\xff\xfe\nkey=\x00", int64(-1))
	f.Add("id=a\nid=b", int64(9223372036854775807))
	f.Fuzz(func(t *testing.T, fields string, n int64) {
		values := map[string]any{}
		for _, line := range strings.Split(fields, "\n") {
			k, v, _ := strings.Cut(line, "=")
			values[k] = v
		}
		r := &reader{stream: "orders"}
		e := r.entry(redis.XMessage{ID: "1-0", Values: values}, n)
		got := (&delivery{s: &subscription{binding: "b"}, e: e}).Message()
		want, _ := values[FieldID].(string)
		if got.ID != want {
			t.Fatalf("id %q, want the id field's %q", got.ID, want)
		}
		if got.Topic != "orders" || got.Binding != "b" || int64(got.Deliveries) != int64(int(n)) {
			t.Fatalf("topic %q binding %q deliveries %d (broker's %d)", got.Topic, got.Binding, got.Deliveries, n)
		}
		for k, v := range values {
			h, isHeader := strings.CutPrefix(k, HeaderFieldPrefix)
			if isHeader && got.Headers[h] != v {
				t.Fatalf("field %q = %q read as header %q = %q", k, v, h, got.Headers[h])
			}
		}
		if len(got.Headers) > len(values) {
			t.Fatalf("headers %q from fields %q", got.Headers, values)
		}
		// What the publisher writes reads back as it was.
		m := got.Message
		m.Topic = "orders"
		if m.ID == "" || m.Validate(0) != nil {
			return
		}
		stored := map[string]any{}
		vals := Values(m)
		for i := 0; i+1 < len(vals); i += 2 {
			switch v := vals[i+1].(type) {
			case []byte:
				stored[vals[i].(string)] = string(v)
			default:
				stored[vals[i].(string)] = v
			}
		}
		back := r.entry(redis.XMessage{ID: "2-0", Values: stored}, 1).msg
		if back.ID != m.ID || back.Key != m.Key || string(back.Payload) != string(m.Payload) || !maps.Equal(back.Headers, m.Headers) && len(m.Headers)+len(back.Headers) > 0 {
			t.Fatalf("%+v written as %q reads back as %+v", m, stored, back)
		}
	})
}
