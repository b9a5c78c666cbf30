package inbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCheck feeds the inbox's input checks (Inbox.check: source, message
// id, metadata) random values under random caps. The properties: a
// rejection is an *InputError that matches ErrInvalidInput and names its
// field; an accepted source and id are non-empty valid UTF-8, free of C0
// controls and DEL, within their caps (stored as given: check returns
// nothing else for them); accepted metadata is stored as JSON that decodes
// to what the caller's value encodes to, within the cap, with no NUL.
// Metadata is tried as json.RawMessage (text already encoded, any bytes)
// and as a string value.
func FuzzCheck(f *testing.F) {
	f.Add("orders", "m-1", []byte(`{"trace":"abc"}`), 256, 256, 1024)
	f.Add("", "m-1", []byte(nil), 256, 256, 1024)
	f.Add("orders", "", []byte(nil), 256, 256, 1024)
	f.Add("src\x00", "m", []byte(nil), 256, 256, 1024)
	f.Add("src", "abc\x00x", []byte(nil), 256, 256, 1024)
	f.Add("src", "m\x7f", []byte(nil), 256, 256, 1024)
	f.Add("src", "m\xff", []byte(nil), 256, 256, 1024)
	f.Add("ééé", "m", []byte(nil), 3, 256, 1024)
	f.Add("ééé", "m", []byte(nil), 2, 256, 1024)
	f.Add("src", "m", []byte(`{"a":"\u0000"}`), 256, 256, 1024)
	f.Add("src", "m", []byte(`{"a":"\\u0000"}`), 256, 256, 1024)
	f.Add("src", "m", []byte(`{"a": 1 , "b" : [ ] }`), 256, 256, 1024)
	f.Add("src", "m", []byte(`{"a":`), 256, 256, 1024)
	f.Add("src", "m", []byte(`null`), 256, 256, 1024)
	f.Add("src", "m", []byte(`"\ud800"`), 256, 256, 1024)
	f.Add("src", "m", []byte(`{"a":1}`), 256, 256, 3)
	f.Fuzz(func(t *testing.T, source, id string, meta []byte, maxSource, maxID, maxMeta int) {
		clamp := func(n int) int { return 1 + abs(n)%(1<<16) }
		ib := &Inbox[any]{maxSource: clamp(maxSource), maxID: clamp(maxID), maxMeta: clamp(maxMeta)}
		for _, metadata := range []any{nil, json.RawMessage(meta), string(meta)} {
			if metadata != nil && meta == nil {
				continue
			}
			stored, err := ib.check(source, id, metadata)
			if err != nil {
				var ie *InputError
				if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("check returned %T, not an *InputError: %v", err, err)
				}
				if ie.Field != "source" && ie.Field != "message id" && ie.Field != "metadata" || ie.Reason == "" {
					t.Fatalf("an incomplete error: %+v", ie)
				}
				continue
			}
			checkAcceptedKey(t, "source", source, ib.maxSource)
			checkAcceptedKey(t, "message id", id, ib.maxID)
			if metadata == nil {
				if stored != nil {
					t.Fatalf("nil metadata stored as %#v, not NULL", stored)
				}
				continue
			}
			text, ok := stored.(string)
			if !ok || len(text) > ib.maxMeta || !json.Valid([]byte(text)) {
				t.Fatalf("metadata %q stored as %#v (cap %d)", meta, stored, ib.maxMeta)
			}
			// Numbers compare as their text: a valid JSON number can be
			// beyond float64 (1e400).
			got, err := decodeJSON([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(metadata)
			want, err := decodeJSON(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("metadata %q stored as %s", meta, text)
			}
			if strings.Contains(text, `\u0000`) && hasNULEscape([]byte(text)) {
				t.Fatalf("metadata stored with a NUL: %s", text)
			}
			if s, ok := metadata.(string); ok && utf8.ValidString(s) && got != s {
				t.Fatalf("string metadata %q stored as %q", s, got)
			}
		}
	})
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func checkAcceptedKey(t *testing.T, field, s string, max int) {
	t.Helper()
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		t.Fatalf("accepted %s %q (cap %d)", field, s, max)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			t.Fatalf("accepted %s %q with %U", field, s, r)
		}
	}
}

func abs(n int) int {
	if n < 0 {
		return -(n + 1)
	}
	return n
}
