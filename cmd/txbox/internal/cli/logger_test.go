package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// JSON logs carry durations as text a person reads ("1.5s", not
// 1500000000) and escape strings and errors from the database.
func TestJSONLogsReadable(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "info", true)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("relay started", "poll_interval", 1500*time.Millisecond, "key", "a\x1b[31mb", "err", errors.New("bad\nrow"))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q is not JSON: %v", buf.String(), err)
	}
	want := map[string]string{"poll_interval": "1.5s", "key": text("a\x1b[31mb"), "err": text("bad\nrow")}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %#v, want %q", k, line[k], v)
		}
	}
	if line["key"] == "a\x1b[31mb" {
		t.Error("escape sequence logged raw")
	}
}
