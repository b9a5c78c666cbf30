package testenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

// WireField is one field of docs/wire-format.json.
type WireField struct {
	Where string `json:"where"`
	Name  string `json:"name"`
	Value string `json:"value"`
	When  string `json:"when"`
}

type wireSpec struct {
	Pattern string `json:"created_at_pattern"`
	Brokers map[string]struct {
		Fields []WireField `json:"fields"`
	} `json:"brokers"`
}

func loadWireSpec(t testing.TB) wireSpec {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "wire-format.json"))
	Must(t, err, "read docs/wire-format.json")
	var s wireSpec
	Must(t, json.Unmarshal(raw, &s), "parse docs/wire-format.json")
	return s
}

// WireMessage is the message the wire tests publish in full: an ordering
// key, a Content-Type and another header, a created-at with a time zone
// and nanoseconds.
func WireMessage(topic string) txbox.Message {
	return txbox.Message{ID: Name("wire-id"), Topic: topic, Key: "customer-7", Payload: []byte(`{"n":1}`),
		Headers:   map[string]string{"Content-Type": "application/json", "X-Trace": "trace-1"},
		CreatedAt: time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.FixedZone("CET", 3600))}
}

// WireBare is the message the wire tests publish bare: no key, no headers
// (its created-at is set: the relay always has one).
func WireBare(topic string) txbox.Message {
	return txbox.Message{ID: Name("wire-bare"), Topic: topic, Payload: []byte("bare"),
		CreatedAt: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
}

// WireRead is what a raw SDK read of one message found: "where:name" →
// value, for every field it saw (an absent field has no entry).
type WireRead map[string]string

// CheckWire checks read, the raw read of m as published to broker with
// prefix before the topic and CloudEvents source (cloudevents: configured
// or not), against every field docs/wire-format.json lists for broker.
// A field whose condition does not hold for m must be absent.
func CheckWire(t testing.TB, broker string, m txbox.Message, prefix, source string, cloudevents bool, read WireRead) {
	t.Helper()
	spec := loadWireSpec(t)
	b, ok := spec.Brokers[broker]
	if !ok || len(b.Fields) == 0 {
		t.Fatalf("docs/wire-format.json lists no fields for %q", broker)
	}
	pattern := regexp.MustCompile(spec.Pattern)
	ctName, ct := "", ""
	for k, v := range m.Headers {
		if strings.EqualFold(k, "Content-Type") {
			ctName, ct = k, v
		}
	}
	created := m.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
	for _, f := range b.Fields {
		at := f.Where + ":" + f.Name
		var holds bool
		switch f.When {
		case "":
			holds = true
		case "key":
			holds = m.Key != ""
		case "content_type":
			holds = ctName != ""
		case "headers":
			_, holds = m.Headers[strings.TrimPrefix(f.Value, "header:")]
		case "created_at":
			holds = !m.CreatedAt.IsZero()
		case "cloudevents":
			holds = cloudevents
		default:
			t.Fatalf("%s %s: unknown condition %q", broker, at, f.When)
		}
		got, present := read[at]
		if !holds {
			if present {
				t.Errorf("%s %s: present (%q), but the spec has it only when %s", broker, at, got, f.When)
			}
			continue
		}
		var want string
		switch v := f.Value; {
		case v == "id":
			want = m.ID
		case v == "topic":
			want = m.Topic
		case v == "prefix+topic":
			want = prefix + m.Topic
		case v == "key":
			want = m.Key
		case v == "payload":
			want = string(m.Payload)
		case v == "created_at":
			want = created
			if present && !pattern.MatchString(got) {
				t.Errorf("%s %s: %q does not match %s", broker, at, got, spec.Pattern)
			}
		case v == "created_at_seconds":
			want = strconv.FormatInt(m.CreatedAt.Unix(), 10)
		case v == "content_type":
			want = ct
		case v == "source":
			want = source
		case strings.HasPrefix(v, "header:"):
			want = m.Headers[v[len("header:"):]]
		case strings.HasPrefix(v, "="):
			want = v[1:]
		default:
			t.Fatalf("%s %s: unknown value %q", broker, at, v)
		}
		if !present {
			t.Errorf("%s %s: absent; want %q", broker, at, want)
		} else if got != want {
			t.Errorf("%s %s = %q; want %q", broker, at, got, want)
		}
	}
}
