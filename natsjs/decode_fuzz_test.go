package natsjs

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fuzzMsg is a jetstream.Msg with the parts delivery.Message reads; the
// others are not called (the nil embedded interface would panic).
type fuzzMsg struct {
	jetstream.Msg
	subject string
	data    []byte
	hdr     nats.Header
	meta    *jetstream.MsgMetadata
}

func (m *fuzzMsg) Subject() string      { return m.subject }
func (m *fuzzMsg) Data() []byte         { return m.data }
func (m *fuzzMsg) Headers() nats.Header { return m.hdr }
func (m *fuzzMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.meta == nil {
		return nil, errors.New("not a JetStream message")
	}
	return m.meta, nil
}

// FuzzDeliveryMessage feeds delivery.Message random NATS headers (as
// "Name: value" lines, repeats and any case allowed), subjects and
// payloads, with or without JetStream metadata. The properties: no panic;
// the id is Nats-Msg-Id's first value (canonical name, as nats.go reads
// it) and nothing else, whatever Message-Id, Txbox-Message-Id or
// lower-case spellings the headers hold, but on a redriven dead letter
// (a Nats-Msg-Id "redrive:…"), whose id is its Txbox-Message-Id; no Nats-* header reaches the
// handler; the delivery count is the server's (NumDelivered, else 1),
// never a Txbox-Deliveries header's; the topic is the subject; each other
// header arrives with its first value.
func FuzzDeliveryMessage(f *testing.F) {
	f.Add("Nats-Msg-Id: m-1\nTrace: abc", "orders.created", []byte(`{}`), uint64(1), true)
	f.Add("Nats-Msg-Id: m-1\nMessage-Id: forged\nTxbox-Message-Id: forged\nnats-msg-id: lower", "o", []byte(nil), uint64(3), true)
	f.Add("Nats-Msg-Id: redrive:DLQ:7\nTxbox-Message-Id: m-1\nTxbox-Redrive-For: S/d", "o", []byte(nil), uint64(1), true)
	f.Add("Txbox-Deliveries: 99\nTxbox-Subject: elsewhere\nTxbox-Topic: elsewhere", "o", []byte(nil), uint64(1), false)
	f.Add("NATS-MSG-ID: shout\nNats-Expected-Stream: s\nA: 1\nA: 2", "o", []byte(nil), uint64(0), true)
	f.Add("Nats-Msg-Id:\n: empty name\nx", "", []byte("\xff"), uint64(1<<63), true)
	f.Fuzz(func(t *testing.T, headers, subject string, data []byte, delivered uint64, jetStream bool) {
		hdr := nats.Header{}
		for _, line := range strings.Split(headers, "\n") {
			k, v, _ := strings.Cut(line, ":")
			hdr[k] = append(hdr[k], strings.TrimSpace(v)) // raw keys: any spelling
		}
		m := &fuzzMsg{subject: subject, data: data, hdr: hdr}
		if jetStream {
			m.meta = &jetstream.MsgMetadata{NumDelivered: delivered}
		}
		got := (&delivery{m: m, sub: &subscription{binding: "b"}}).Message()
		var wantID string
		if v := hdr[jetstream.MsgIDHeader]; len(v) > 0 {
			wantID = v[0]
		}
		if v := hdr["Txbox-Message-Id"]; strings.HasPrefix(wantID, "redrive:") && len(v) > 0 && v[0] != "" {
			wantID = v[0] // a redriven dead letter's original id
		}
		if got.ID != wantID {
			t.Fatalf("id %q, want Nats-Msg-Id's %q (headers %q)", got.ID, wantID, hdr)
		}
		wantN := 1
		if jetStream {
			wantN = int(delivered)
		}
		if got.Deliveries != wantN || got.Topic != subject || got.Binding != "b" || string(got.Payload) != string(data) {
			t.Fatalf("deliveries %d (server's %d) topic %q binding %q", got.Deliveries, wantN, got.Topic, got.Binding)
		}
		for k, v := range got.Headers {
			if strings.HasPrefix(strings.ToLower(k), "nats-") {
				t.Fatalf("header %q reached the handler", k)
			}
			if len(hdr[k]) == 0 || hdr[k][0] != v {
				t.Fatalf("header %q = %q, on the wire %q", k, v, hdr[k])
			}
		}
	})
}
