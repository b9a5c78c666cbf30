package testenv

import (
	"encoding/json"
	"fmt"
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

// WireField is one field of docs/reference/wire-format.json.
type WireField struct {
	Where    string `json:"where"`
	Name     string `json:"name"`
	Value    string `json:"value"`
	Encoding string `json:"encoding"`
	When     string `json:"when"`
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
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "reference", "wire-format.json"))
	Must(t, err, "read docs/reference/wire-format.json")
	var s wireSpec
	Must(t, json.Unmarshal(raw, &s), "parse docs/reference/wire-format.json")
	return s
}

// WireMessage is the message the wire tests publish in full: an ordering
// key, a content type (named content-type, in lower case: the publishers
// send it under the broker's canonical name; its value has a space, which
// the NATS CloudEvents binding percent-encodes), another header and a
// claim check reference (txbox.HeaderClaimCheck, which travels as a user
// header does), a
// created-at with a time zone and nanoseconds.
func WireMessage(topic string) txbox.Message {
	return txbox.Message{ID: Name("wire-id"), Topic: topic, Key: "customer-7", Payload: []byte(`{"n":1}`),
		Headers: map[string]string{"content-type": "application/json; charset=utf-8", "X-Trace": "trace-1",
			txbox.HeaderClaimCheck: "0193a7c2-claim-ref"},
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
// or not), against every field docs/reference/wire-format.json lists for broker.
// A field whose condition does not hold for m must be absent.
func CheckWire(t testing.TB, broker string, m txbox.Message, prefix, source string, cloudevents bool, read WireRead) {
	t.Helper()
	spec := loadWireSpec(t)
	b, ok := spec.Brokers[broker]
	if !ok || len(b.Fields) == 0 {
		t.Fatalf("docs/reference/wire-format.json lists no fields for %q", broker)
	}
	pattern := regexp.MustCompile(spec.Pattern)
	ctName, ct := "", ""
	for k, v := range m.Headers {
		if strings.EqualFold(k, "Content-Type") {
			ctName, ct = k, v
		}
	}
	created := m.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
	condition := func(at, c string) bool {
		neg := strings.HasPrefix(c, "!")
		var holds bool
		switch strings.TrimPrefix(c, "!") {
		case "key":
			holds = m.Key != ""
		case "content_type":
			holds = ctName != ""
		case "headers":
			for _, f := range b.Fields {
				if f.Where+":"+f.Name == at {
					_, holds = m.Headers[strings.TrimPrefix(f.Value, "header:")]
				}
			}
		case "created_at":
			holds = !m.CreatedAt.IsZero()
		case "cloudevents":
			holds = cloudevents
		default:
			t.Fatalf("%s %s: unknown condition %q", broker, at, c)
		}
		return holds != neg
	}
	listed := map[string]bool{} // the fields the spec has for m
	for _, f := range b.Fields {
		at := f.Where + ":" + f.Name
		holds := true
		if f.When != "" {
			for _, c := range strings.Split(f.When, "&") {
				holds = holds && condition(at, c)
			}
		}
		got, present := read[at]
		if !holds {
			if present {
				t.Errorf("%s %s: present (%q), but the spec has it only when %s", broker, at, got, f.When)
			}
			continue
		}
		listed[at] = true
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
		switch f.Encoding {
		case "":
		case "percent":
			want = PercentEncoded(want)
		default:
			t.Fatalf("%s %s: unknown encoding %q", broker, at, f.Encoding)
		}
		if !present {
			t.Errorf("%s %s: absent; want %q", broker, at, want)
		} else if got != want {
			t.Errorf("%s %s = %q; want %q", broker, at, got, want)
		}
	}
	// The content type travels under the name the spec gives it, in that
	// case, and under no other spelling.
	for at, got := range read {
		where, name, _ := strings.Cut(at, ":")
		name = strings.TrimPrefix(name, "h:")
		if !listed[at] && (where == "header" || where == "field" || where == "property") &&
			(strings.EqualFold(name, "content-type") || strings.EqualFold(name, "content_type")) {
			t.Errorf("%s %s: the content type (%q) under a name the spec does not give it for this message", broker, at, got)
		}
	}
}

// PercentEncoded is s percent-encoded as the CloudEvents NATS protocol
// binding requires (3.1.3.2), written from the binding's text: every byte
// of a space, a double quote, a percent sign and any character outside
// U+0021 to U+007E as %XY in upper-case hex.
func PercentEncoded(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r > ' ' && r < 0x7f && r != '"' && r != '%' {
			b.WriteRune(r)
			continue
		}
		for _, c := range []byte(string(r)) {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
