package txbox

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

type traceKey struct{}

// Config.Propagate: Add stores the headers it sets for Add's context in
// every message, never over a header the caller set (in any case), never
// breaking the header rules or the size cap, and without touching the
// caller's maps.
func TestPropagateHeaders(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	calls := 0
	o := &Outbox[any]{maxPayload: 200, propagate: func(ctx context.Context, h map[string]string) {
		calls++
		if len(h) != 0 {
			t.Errorf("Propagate got a map holding %v, want an empty one", h)
		}
		if v, _ := ctx.Value(traceKey{}).(string); v != "" {
			h["traceparent"] = v
			h["tracestate"] = "a=1"
			h["Nats-Msg-Id"] = "forged" // reserved: left out
			h["bad"] = "line\nbreak"    // a control character: left out
			h["trailing"] = "space "    // NATS would trim it: left out
		}
	}}
	ctx := context.WithValue(context.Background(), traceKey{}, tp)
	own := map[string]string{"TraceParent": "00-mine", "x": "1"}
	ownCopy := maps.Clone(own)
	msgs := []Message{
		{Topic: "a"},
		{Topic: "b", Headers: own},
		{Topic: "c", Payload: []byte(strings.Repeat("p", 125))}, // only traceparent (the first by name) fits the cap of 200
		{Topic: "d", Payload: []byte(strings.Repeat("p", 190))}, // nothing fits
	}
	rows, _, _, err := o.rows(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("Propagate called %d times for one Add, want 1", calls)
	}
	if !maps.Equal(own, ownCopy) {
		t.Errorf("the caller's headers changed: %v", own)
	}
	got := map[string]map[string]string{}
	for _, r := range rows {
		var h map[string]string
		if err := json.Unmarshal([]byte(r.Headers), &h); err != nil {
			t.Fatalf("headers %q: %v", r.Headers, err)
		}
		got[r.Topic] = h
	}
	want := map[string]map[string]string{
		"a": {"traceparent": tp, "tracestate": "a=1"},
		"b": {"TraceParent": "00-mine", "x": "1", "tracestate": "a=1"},
		"c": {"traceparent": tp},
		"d": nil,
	}
	for topic, w := range want {
		if !maps.Equal(got[topic], w) {
			t.Errorf("message %s: headers %v, want %v", topic, got[topic], w)
		}
	}
	if !strings.Contains(rows[0].Headers, tp) && !strings.Contains(rows[1].Headers, tp) {
		t.Errorf("no row holds the traceparent")
	}

	// A context without a trace adds nothing.
	rows, _, _, err = o.rows(context.Background(), []Message{{Topic: "a"}})
	if err != nil || rows[0].Headers != "{}" {
		t.Errorf("without a trace: headers %q, err %v; want {}", rows[0].Headers, err)
	}
	// An invalid message is refused before Propagate is asked.
	calls = 0
	if _, _, _, err := o.rows(ctx, []Message{{}}); err == nil || calls != 0 {
		t.Errorf("invalid message: err %v, %d Propagate calls; want an error and none", err, calls)
	}
}
