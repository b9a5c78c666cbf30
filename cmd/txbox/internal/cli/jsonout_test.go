package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// writeJSON's output is valid JSON that decodes to the value written, and
// holds no control, bidi or other non-printing character raw.
func TestWriteJSONEscapes(t *testing.T) {
	in := map[string]string{"v": "a\x1b[2J\u202e\u200b\U000e0001\xff\u00e9\U0001f600"}
	var buf bytes.Buffer
	if err := writeJSON(&buf, in); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	if bytes.ContainsAny(out, "\x1b\u202e\u200b\U000e0001") {
		t.Fatalf("raw characters in %q", out)
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("not JSON: %v: %s", err, out)
	}
	if want := "a\x1b[2J\u202e\u200b\U000e0001\ufffd\u00e9\U0001f600"; back["v"] != want {
		t.Fatalf("decoded %q, want %q", back["v"], want)
	}
}

// /dev/null is a character device but not a terminal: txbox stats --watch
// > /dev/null must not write the screen-clearing escapes, and confirmBulk
// must not wait for an answer from it.
func TestDevNullIsNotATerminal(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no %s: %v", os.DevNull, err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatalf("isTerminal(%s) = true", os.DevNull)
	}
	if isTerminal(&bytes.Buffer{}) {
		t.Fatal("isTerminal of a buffer = true")
	}
}
