package relay

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/outboxsql"
)

// FuzzDecodeRow feeds decodeRow claimed rows as any SQL writer could store
// them: any id, topic, key and payload text, any headers column (JSON or
// not), a row the scan already found invalid. The property: a row is either
// a message that passes Validate, carries the row's columns unchanged and
// no reserved header, or an error (which prepare reports as an invalid
// row); never a panic.
func FuzzDecodeRow(f *testing.F) {
	seeds := []struct {
		id, topic, key, headers string
		payload                 []byte
	}{
		{"m-1", "orders.created", "", "{}", []byte(`{"n":1}`)},
		{"m-1", "orders.created", "k", `{"trace":"abc","Content-Type":"application/json"}`, nil},
		{"", "t", "", "{}", nil},
		{"m", "", "", "{}", nil},
		{"m", "a b", "", "{}", nil},
		{"m", "t", "", `{"Nats-Msg-Id":"x"}`, nil},
		{"m", "t", "", `{"txbox-attempt":"1"}`, nil},
		{"m", "t", "", `{"Message-Id":"x"}`, nil},
		{"m", "t", "", `{"message_id":"x"}`, nil},
		{"m", "t", "", `{"\u004eats-Msg-Id":"x"}`, nil},
		{"m", "t", "", `{"a":"1","a":"2"}`, nil},
		{"m", "t", "", `{"a":1}`, nil},
		{"m", "t", "", `{"a":null}`, nil},
		{"m", "t", "", `null`, nil},
		{"m", "t", "", `[]`, nil},
		{"m", "t", "", `""`, nil},
		{"m", "t", "", ``, nil},
		{"m", "t", "", `{"a":"\ud800"}`, nil},
		{"m", "t", "", "{\"a\":\"\xff\"}", nil},
		{"m", "t", "", `{"a":" padded "}`, nil},
		{"m", "t", "", `{"a":"tab\there"}`, nil},
		{"m", "t", "", `{"a b":"v"}`, nil},
		{"m", "t", "", `{"":"v"}`, nil},
		{"m", "t", "", `{"a":"line\nfeed"}`, nil},
		{"m", "t", "", `  {"a":"v"}  `, nil},
		{"m\x00", "t", "", "{}", nil},
		{"m", "t\xff", "", "{}", nil},
		{"m", "t", "k\x7f", "{}", nil},
		{strings.Repeat("i", txbox.MaxIDLen+1), "t", "", "{}", nil},
	}
	for _, s := range seeds {
		f.Add(s.id, s.topic, s.key, s.payload, []byte(s.headers), false)
	}
	f.Add("m", "t", "", []byte(nil), []byte("{}"), true)
	f.Fuzz(func(t *testing.T, id, topic, key string, payload, headers []byte, scanInvalid bool) {
		row := outboxsql.Claimed{Seq: 7, ID: id, Topic: topic, Key: key, Payload: payload, Headers: headers, Attempts: 1, CreatedAt: time.Unix(1, 0)}
		if scanInvalid {
			row.Invalid = errors.New("attempts holds \"x\", not an integer")
		}
		m, err := decodeRow(row)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if scanInvalid {
			t.Fatal("a row the scan found invalid was accepted")
		}
		if verr := m.Validate(0); verr != nil {
			t.Fatalf("accepted a message that fails Validate: %v", verr)
		}
		if m.ID == "" {
			t.Fatal("accepted an empty id")
		}
		if m.ID != id || m.Topic != topic || m.Key != key || string(m.Payload) != string(payload) {
			t.Fatalf("columns changed: %+v", m)
		}
		for k := range m.Headers {
			if txbox.IsReservedHeader(k) {
				t.Fatalf("accepted reserved header %q", k)
			}
		}
		// The headers re-encode to a JSON object that decodes the same.
		b, jerr := json.Marshal(m.Headers)
		if jerr != nil {
			t.Fatal(jerr)
		}
		var back map[string]string
		if jerr := json.Unmarshal(b, &back); jerr != nil {
			t.Fatal(jerr)
		}
		if len(m.Headers) > 0 && !maps.Equal(back, m.Headers) {
			t.Fatalf("headers %q re-decode as %q", m.Headers, back)
		}
	})
}
