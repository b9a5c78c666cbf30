package txbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"unicode"
)

// FuzzMessageRows feeds Validate and Add's row building (Outbox.rows)
// random messages: any id, topic, key, payload and two headers, and any
// cap. The properties: Validate never panics and returns nil or an
// *InvalidMessageError; rows accepts exactly what Validate accepts, and a
// valid message's row holds its columns unchanged, with headers whose JSON
// decodes to the message's headers and a message rebuilt from the row
// passes Validate again.
func FuzzMessageRows(f *testing.F) {
	f.Add("", "orders.created", "", []byte(`{"n":1}`), "trace", "abc", "", "", 0)
	f.Add("m-1", "orders.created", "customer-7", []byte(nil), "Content-Type", "application/json", "X-Retry", "2", 1<<20)
	f.Add("m-1", "t", "", []byte("payload"), "a", "1", "b", "2", 3)
	f.Add("m-1", "", "", []byte(nil), "", "", "", "", 0)
	f.Add("m-1", "a b", "", []byte(nil), "", "", "", "", 0)
	f.Add("m-1", "a\u00a0b", "", []byte(nil), "", "", "", "", 0)
	f.Add("m-1", "注文\u3000作成", "", []byte(nil), "", "", "", "", 0)
	f.Add("m\x00", "t", "", []byte(nil), "", "", "", "", 0)
	f.Add("m", "t\xff", "", []byte(nil), "", "", "", "", 0)
	f.Add("m", "t", "k\x7f", []byte(nil), "", "", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "Nats-Msg-Id", "x", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "TXBOX-ATTEMPT", "1", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "Message_ID", "x", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "a b", "x", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "é", "x", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "a", " x", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "a", "x\t", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "a", "tab\tinside", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "a", "\xc3", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "a", "line\nfeed", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "a", "<script>&\u2028\"\\", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "a", "\ufffd", "", "", 0)
	f.Add("m", "t", "", []byte(nil), "content-type", "text/plain", "Content-Type", "application/json", 0)
	f.Add(strings.Repeat("i", MaxIDLen+1), "t", "", []byte(nil), "", "", "", "", 0)
	f.Add("m", strings.Repeat("t", MaxTopicLen+1), "", []byte(nil), "", "", "", "", 0)
	f.Fuzz(func(t *testing.T, id, topic, key string, payload []byte, k1, v1, k2, v2 string, maxBytes int) {
		m := Message{ID: id, Topic: topic, Key: key, Payload: payload}
		if k1 != "" || v1 != "" {
			m.Headers = map[string]string{k1: v1}
		}
		if k2 != "" || v2 != "" {
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[k2] = v2
		}
		verr := m.Validate(maxBytes)
		if verr != nil {
			var ime *InvalidMessageError
			if !errors.As(verr, &ime) {
				t.Fatalf("Validate returned %T, not an *InvalidMessageError: %v", verr, verr)
			}
			if ime.Field == "" || ime.Reason == "" || ime.ID != id {
				t.Fatalf("an incomplete error: %+v", ime)
			}
		}
		o := &Outbox[any]{maxPayload: maxBytes}
		rows, ids, _, err := o.rows(context.Background(), []Message{m})
		if (err == nil) != (verr == nil) {
			t.Fatalf("Validate says %v, rows says %v", verr, err)
		}
		if err != nil {
			return
		}
		for k := range m.Headers {
			if IsReservedHeader(k) {
				t.Fatalf("accepted reserved header %q", k)
			}
		}
		r := rows[0]
		if ids[0] == "" || r.ID != ids[0] || (id != "" && r.ID != id) {
			t.Fatalf("id %q stored as %q (returned %q)", id, r.ID, ids[0])
		}
		if r.Topic != topic || r.Key != key || string(r.Payload) != string(payload) || r.Payload == nil {
			t.Fatalf("columns changed: %+v", r)
		}
		var back map[string]string
		if err := json.Unmarshal([]byte(r.Headers), &back); err != nil {
			t.Fatalf("headers %q: %v", r.Headers, err)
		}
		if len(back) != len(m.Headers) || (len(back) > 0 && !maps.Equal(back, m.Headers)) {
			t.Fatalf("headers %q stored as %s, read back as %q", m.Headers, r.Headers, back)
		}
		again := Message{ID: r.ID, Topic: r.Topic, Key: r.Key, Payload: r.Payload, Headers: back}
		if err := again.Validate(maxBytes); err != nil {
			t.Fatalf("the stored row fails Validate: %v", err)
		}
	})
}

// FuzzIndexSpace checks the topic's white space search against
// strings.IndexFunc with unicode.IsSpace.
func FuzzIndexSpace(f *testing.F) {
	for _, s := range []string{"orders.created", "a b", "a\tb", "é x", "a\u00a0b", "x\u2028", "日本\u2029", "", "\xff \xfe",
		"注文\u3000作成", "a\u0085b", "a\u1680b", "a\u2000b", "a\u200ab", "a\u202fb", "a\u205fb", "a\vb", "a\fb", "a\u200bb", "\xe3\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := indexSpace(s), strings.IndexFunc(s, unicode.IsSpace); got != want {
			t.Fatalf("indexSpace(%q) = %d, want %d", s, got, want)
		}
	})
}

// Validate refuses a topic with any Unicode white space, the ideographic
// space U+3000 among them, naming the character; a zero-width space
// (U+200B, not white space) passes.
func TestValidateTopicUnicodeSpace(t *testing.T) {
	for _, r := range []rune{' ', '\u0085', '\u00a0', '\u1680', '\u2000', '\u2007', '\u200a', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000'} {
		m := Message{ID: "m", Topic: "注文" + string(r) + "作成"}
		err := m.Validate(0)
		var ime *InvalidMessageError
		if !errors.As(err, &ime) || ime.Field != "topic" || !strings.Contains(ime.Reason, fmt.Sprintf("%U", r)) {
			t.Errorf("topic with %U: %v, want an error naming it", r, err)
		}
	}
	m := Message{ID: "m", Topic: "t", Headers: map[string]string{"content-type": "text/plain", "Content-TYPE": "text/html"}}
	if err := m.Validate(0); err == nil || !strings.Contains(err.Error(), "content type twice") {
		t.Errorf("two Content-Type spellings: %v, want an error", err)
	}
	if m := (Message{ID: "m", Topic: "a\u200bb"}); m.Validate(0) != nil {
		t.Errorf("topic with U+200B refused: %v", m.Validate(0))
	}
}

// BenchmarkValidate: the relay validates every message it relays.
func BenchmarkValidate(b *testing.B) {
	m := Message{ID: "01J9Z3K6T1V2W3X4Y5Z6A7B8C9", Topic: "shop.orders.created", Key: "customer-42",
		Payload: []byte(`{"order":42}`), Headers: map[string]string{"Content-Type": "application/json", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	for b.Loop() {
		if err := m.Validate(0); err != nil {
			b.Fatal(err)
		}
	}
}
