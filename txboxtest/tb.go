package txboxtest

import (
	"fmt"
	"strings"
	"time"
)

// TB is the part of testing.TB that txboxtest uses: pass a *testing.T or
// *testing.B. It is an interface of its own so that a fake can record
// failures (txboxtest's own tests do).
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// banner begins every failure message, so that a failure says where it
// comes from.
const banner = "txboxtest: "

func fail(tb TB, format string, args ...any) {
	tb.Helper()
	tb.Fatalf(banner+format, args...)
}

// DefaultInactivityTimeout is how long the waits of this package go on
// without any progress (no relay round publishing, no broker event) before
// they fail.
const DefaultInactivityTimeout = 10 * time.Second

func inactivity(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return DefaultInactivityTimeout
}

// describe is a one-line summary of a message, for failure messages.
func describe(id, topic, key string, payload []byte, headers map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "id=%s topic=%s", id, topic)
	if key != "" {
		fmt.Fprintf(&b, " key=%s", key)
	}
	fmt.Fprintf(&b, " payload=%.80q", payload)
	if len(headers) > 0 {
		fmt.Fprintf(&b, " headers=%v", headers)
	}
	return b.String()
}
