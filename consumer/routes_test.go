package consumer

import (
	"context"
	"testing"

	"github.com/txbox/txbox"
)

// The most specific matching route claims a delivery: topic, then version,
// then content type; headers are found in any case and the content type
// is compared without its parameters.
func TestRoutePrecedence(t *testing.T) {
	c := &Consumer[struct{}]{cfg: Config{VersionHeader: DefaultVersionHeader, Concurrency: 1}}
	noop := func(context.Context, Message) error { return nil }
	for _, h := range []HandlerConfig{
		{Name: "json", Route: Route{ContentType: "Application/JSON"}},
		{Name: "v2", Route: Route{Version: "2"}},
		{Name: "v2-json", Route: Route{Version: "2", ContentType: "application/json"}},
		{Name: "a", Route: Route{Topic: "a"}},
		{Name: "a-v2", Route: Route{Topic: "a", Version: "2"}},
	} {
		h.Binding = "b"
		if err := c.HandleAtLeastOnce(h, noop); err != nil {
			t.Fatal(err)
		}
	}
	bs := c.bindings()
	if len(bs) != 1 || bs[0].single != nil {
		t.Fatalf("bindings %+v: want one routed binding", bs)
	}
	for _, tc := range []struct {
		topic   string
		headers map[string]string
		want    string
	}{
		{"a", map[string]string{"message-version": "2", "content-type": "application/json"}, "a-v2"},
		{"a", map[string]string{"Message-Version": "1"}, "a"},
		{"b", map[string]string{"MESSAGE-VERSION": "2", "Content-Type": "application/json; charset=utf-8"}, "v2-json"},
		{"b", map[string]string{"Message-Version": "2", "Content-Type": "text/plain"}, "v2"},
		{"b", map[string]string{"Content-Type": " APPLICATION/JSON "}, "json"},
		{"b", map[string]string{"Message-Version": "3"}, ""},
		{"b", nil, ""},
	} {
		msg := Message{Message: txbox.Message{Topic: tc.topic, Headers: tc.headers}}
		got := ""
		if h := c.route(bs[0], &msg); h != nil {
			got = h.Name
		}
		if got != tc.want {
			t.Errorf("topic %q headers %v: routed to %q, want %q", tc.topic, tc.headers, got, tc.want)
		}
	}
}

// One handler without a Route is the binding's only route: no lookup.
func TestSingleRoute(t *testing.T) {
	c := &Consumer[struct{}]{cfg: Config{VersionHeader: DefaultVersionHeader, Concurrency: 3}}
	if err := c.HandleAtLeastOnce(HandlerConfig{Name: "h", Binding: "b", Concurrency: 5}, func(context.Context, Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	bs := c.bindings()
	if len(bs) != 1 || bs[0].single == nil || bs[0].concurrency != 5 {
		t.Fatalf("bindings %+v: want one binding with its single route and concurrency 5", bs[0])
	}
}
