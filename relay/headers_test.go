package relay

import (
	"encoding/json"
	"maps"
	"testing"
)

// FuzzDecodeHeaders checks decodeHeaders against encoding/json on any
// column text: the same map, and an error exactly when encoding/json
// returns one.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a": "b"}`, `{"tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
		` { "a" : "b" , "c":"d" } `, `{"a":"1","a":"2"}`, `{"a":1}`, `{"a":null}`, `null`, `[]`, `{"a":"\u00e9"}`,
		`{"a":"\n"}`, "{\"a\":\"\xff\"}", `{"é": "ü"}`, `{"a":"b",}`, `{"a":"b"} x`, `{"a" "b"}`, `{`, ``, `{"a":"b"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeHeaders(b)
		var want map[string]string
		werr := json.Unmarshal(b, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", b, err, werr)
		}
		if err == nil && !maps.Equal(got, want) {
			t.Fatalf("%q: %v, encoding/json reads %v", b, got, want)
		}
	})
}

// TestDecodeHeadersAllocations guards the cost of the usual headers column:
// one copy of the text and the map (two allocations for a small one),
// nothing per header.
func TestDecodeHeadersAllocations(t *testing.T) {
	b := []byte(`{"tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	if a := testing.AllocsPerRun(200, func() {
		if h, err := decodeHeaders(b); err != nil || len(h) != 2 {
			t.Fatal(h, err)
		}
	}); a > 3 {
		t.Errorf("%v allocations, want at most 3", a)
	}
}
