package cli_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/tests/testenv"
)

// A setting that would make the broker refuse every message is refused at
// start, naming the flag and the limit, before any service is reached: not
// found out by parking every message as an invalid row.
func TestBrokerLimitsAtStart(t *testing.T) {
	t.Parallel()
	db := emptySQLite(t, "limits.db")
	long := func(n int) string { return strings.Repeat("a", n-1) + "." }
	natsMax := natsjs.MaxPrefix(natsjs.DefaultMaxControlLine)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--broker", "nats://127.0.0.1:1", "--subject-prefix", long(4500)}, "--subject-prefix is 4500 bytes, over the limit of "},
		{[]string{"--broker", "nats://127.0.0.1:1", "--subject-prefix", long(natsMax + 1)}, "max_control_line"},
		{[]string{"--subject-prefix", long(4500), "--nats-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0"}, "--subject-prefix is 4500 bytes"}, // the embedded server
		{[]string{"--broker", "amqp://guest:guest@127.0.0.1:1/", "--subject-prefix", long(255)}, "--subject-prefix is 255 bytes, over the limit of 254 bytes: a RabbitMQ routing key"},
		{[]string{"--broker", "amqp://guest:guest@127.0.0.1:1/", "--exchange", strings.Repeat("x", 256)}, "--exchange is 256 bytes, over RabbitMQ's limit of 255 bytes"},
		{[]string{"--broker", "kafka://127.0.0.1:1", "--subject-prefix", long(249)}, "--subject-prefix is 249 bytes, over the limit of 248 bytes: a Kafka topic name"},
		{[]string{"--broker", "nats://127.0.0.1:1", "--stream", strings.Repeat("S", 256)}, "--stream is 256 bytes, over NATS JetStream's limit of 255 bytes"},
		{[]string{"--broker", "nats://127.0.0.1:1", "--cloudevents-source", "/" + strings.Repeat("s", 9000)}, "--cloudevents-source is 9001 bytes, over the limit of 8192 bytes"},
	} {
		args := append([]string{"relay", "--db", db}, tc.args...)
		// The check comes before any broker is dialled; the deadline only
		// ends a relay that passed it and waits for the unreachable broker.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := run(ctx, args...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("relay %.120q: %v; want %q", tc.args, err, tc.want)
		}
	}
	// The library refuses a Prefix that leaves room for no topic, and takes
	// the longest the command takes.
	nc := testenv.NATS(t)
	if _, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: long(4500)}); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("natsjs.NewPublisher with a prefix of 4500 bytes: %v, want ErrInvalidConfig", err)
	}
	if _, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{Prefix: long(natsMax)}); err != nil {
		t.Errorf("natsjs.NewPublisher with a prefix of %d bytes: %v", natsMax, err)
	}
}
