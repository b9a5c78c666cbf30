package natsjs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// The servers ParseURL returns connect: a list whose first server does not
// answer reaches the shared NATS server through the second.
func TestParseURLConnects(t *testing.T) {
	t.Parallel()
	testenv.NATS(t) // skip, or fail under CI=true, if NATS does not answer
	real := strings.TrimPrefix(testenv.NATSURL(), "nats://")
	servers, err := natsjs.ParseURL("nats://127.0.0.1:1, " + real)
	testenv.Must(t, err, "ParseURL")
	nc, err := nats.Connect(strings.Join(servers, ","), nats.DontRandomize(), nats.Timeout(5*time.Second))
	testenv.Must(t, err, "connect to %q", servers)
	defer nc.Close()
	if got := nc.ConnectedUrl(); !strings.HasSuffix(got, real) {
		t.Fatalf("connected to %q, want the server %q", got, real)
	}
}
