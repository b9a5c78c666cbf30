package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// Every bad value of every command fails at start with an error naming the
// flag (none of these touches a service: the broker nats://127.0.0.1:1 is
// never dialled when a value is refused).
func TestFlagBounds(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "b.db")
	relay := []string{"relay", "--db", db, "--broker", "nats://127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(relay, "--batch-size", "100000000"), "--batch-size 100000000: must be at most 10000"},
		{append(relay, "--batch-size", "0"), "--batch-size 0: must be a positive integer"},
		{append(relay, "--poll-interval", "1ns"), "--poll-interval 1ns: must be at least 10ms"},
		{append(relay, "--poll-interval", "2h"), "--poll-interval 2h0m0s: must be at most 1h0m0s"},
		{append(relay, "--retention", "1ns"), "--retention 1ns: must be at least 1s"},
		{append(relay, "--max-attempts", "1000000"), "--max-attempts 1000000: must be at most 1000"},
		{append(relay, "--publish-timeout", "1ns"), "--publish-timeout 1ns: must be at least 100ms"},
		{append(relay, "--stats-interval", "1ms"), "--stats-interval 1ms: must be at least 100ms"},
		{append(relay, "--stats-interval", "-1s"), "--stats-interval -1s: must be positive, or 0"},
		{append(relay, "--subject-prefix", "a b."), `--subject-prefix "a b.": ' ' is not allowed`},
		{append(relay, "--subject-prefix", "a\x00."), `--subject-prefix "a\x00."`},
		{append(relay, "--subject-prefix", "orders.*."), "wildcards"},
		{append(relay, "--subject-prefix", "a..b."), "empty token"},
		{append(relay, "--subject-prefix", ".a"), "empty token"},
		{[]string{"relay", "--db", db, "--subject-prefix", "a b."}, `--subject-prefix "a b."`}, // embedded server
		{[]string{"relay", "--db", db, "--broker", "kafka://127.0.0.1:1", "--subject-prefix", "a:b"}, `':' is not allowed in a Kafka topic`},
		{[]string{"relay", "--db", db, "--broker", "asynq+redis://127.0.0.1:1/0", "--subject-prefix", "a."}, "asynq task types are the topics"},
		{append(relay, "--kafka-transactional-id", "relay-0"), "--kafka-transactional-id is for Kafka (--broker kafka://…), not nats://"},
		{[]string{"relay", "--db", db, "--kafka-transactional-id", "relay-0"}, "--kafka-transactional-id is for Kafka (--broker kafka://…), not the embedded NATS server"},
		{[]string{"relay", "--db", db, "--broker", "redis://127.0.0.1:1/0", "--kafka-transactional-id", "relay-0"}, "--kafka-transactional-id is for Kafka (--broker kafka://…), not redis://"},
		{[]string{"relay", "--db", db, "--broker", "kafka://127.0.0.1:1", "--kafka-transactional-id", " relay-0"}, `--kafka-transactional-id " relay-0": want printable characters`},
		{[]string{"relay", "--db", db, "--broker", "kafka://127.0.0.1:1", "--kafka-transactional-id", strings.Repeat("r", 250)}, "--kafka-transactional-id is 250 bytes, over the limit of 249 bytes"},
		{[]string{"relay", "--db", db, "--broker", "redis://127.0.0.1:1/0", "--stream", "S"}, "--stream is for NATS JetStream"},
		{append(relay, "--nats-dir", "/tmp/x"), "--nats-dir is for the embedded NATS server"},
		{append(relay, "--stream-subjects", "a b.>"), `--stream-subjects: subject "a b.>"`},
		{append(relay, "--stream-subjects", "a.>.b"), "'>' must be the last token"},
		{append(relay, "--stream-subjects", "a.b*"), "must be whole tokens"},
		{[]string{"dead", "list", "--db", db, "--limit", "0"}, "--limit 0: must be a positive integer"},
		{[]string{"dead", "list", "--db", db, "--limit", "1000000"}, "--limit 1000000: must be at most 10000"},
		{[]string{"demo", "--progress", "1ns"}, "--progress 1ns: must be at least 10ms"},
		{[]string{"demo", "--producers", "5000"}, "--producers 5000: must be at most 64"},
		{[]string{"demo", "--rollback-every", "-1"}, "--rollback-every -1: must be positive, or 0"},
		{[]string{"demo", "--timeout", "1ns"}, "--timeout 1ns: must be at least 1s"},
		{[]string{"bench", "drain", "--rows", "0"}, "--rows 0: must be a positive integer"},
		{[]string{"bench", "drain", "--reps", "1000"}, "--reps 1000: must be at most 100"},
		{[]string{"bench", "drain", "--duration", "1ns"}, "--duration 1ns: must be at least 100ms"},
		{[]string{"bench"}, "give one benchmark: drain, add, order, latency, brokers, scale or all"},
		{[]string{"bench", "drain", "--relays", "2"}, "--shapes, --relays, --delete-published and --scheduled apply to bench scale only"},
		{[]string{"bench", "add", "--delete-published"}, "--shapes, --relays, --delete-published and --scheduled apply to bench scale only, not bench add"},
		{[]string{"bench", "scale", "--relays", "0"}, "--relays 0 is out of range"},
		{[]string{"migrate", "up", "--db", "mysql://root@127.0.0.1:1/test", "--schema", "s"}, `--schema "s": a schema is only supported on PostgreSQL, not mysql`},
		{[]string{"stats", "--db", db, "--schema", "s"}, `--schema "s": a schema is only supported on PostgreSQL, not sqlite`},
	} {
		_, _, err := run(context.Background(), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("txbox %q: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	// A bad --shapes is refused before anything is printed or opened.
	out, _, err := run(context.Background(), "bench", "scale", "--shapes", "bogus", "--db", "postgres://u@127.0.0.1:1/x")
	if err == nil || !strings.Contains(err.Error(), `unknown backlog shape "bogus"`) || out != "" {
		t.Errorf("bench scale --shapes bogus: %v, printed %q", err, out)
	}
}

// A variable's bad value is an error naming the variable, unless the flag
// it is the default of is given: then the variable is not read at all.
func TestFlagsOverrideEnv(t *testing.T) {
	db := emptySQLite(t, "e.db")
	relay := []string{"relay", "--db", db, "--broker", "nats://127.0.0.1:1"}
	for _, tc := range []struct {
		env, val string
		flag     []string // overriding the variable
		want     string   // the error without the flag
	}{
		{"TXBOX_BATCH_SIZE", "abc", []string{"--batch-size", "50"}, `TXBOX_BATCH_SIZE="abc": want a positive integer`},
		{"TXBOX_BATCH_SIZE", "100000000", []string{"--batch-size", "50"}, `TXBOX_BATCH_SIZE="100000000": must be at most 10000`},
		{"TXBOX_POLL_INTERVAL", "1ns", []string{"--poll-interval", "1s"}, `TXBOX_POLL_INTERVAL="1ns": must be at least 10ms`},
		{"TXBOX_RETENTION", "soon", []string{"--retention", "0"}, `TXBOX_RETENTION="soon": not a duration`},
		{"TXBOX_MAX_ATTEMPTS", "0", []string{"--max-attempts", "3"}, `TXBOX_MAX_ATTEMPTS="0": want a positive integer`},
		{"TXBOX_PUBLISH_TIMEOUT", "2h", []string{"--publish-timeout", "5s"}, `TXBOX_PUBLISH_TIMEOUT="2h": must be at most 1h0m0s`},
		{"TXBOX_SUBJECT_PREFIX", "a b.", []string{"--subject-prefix", "ok."}, `TXBOX_SUBJECT_PREFIX "a b."`},
		{"TXBOX_STREAM", "a.b", []string{"--stream", "OK", "--stream-subjects", "ok.>"}, `TXBOX_STREAM "a.b"`},
		{"TXBOX_DB", "postgres://h:bad/db", []string{"--db", db}, `TXBOX_DB "postgres://h:bad/db": malformed URL`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.val)
			args := relay
			if tc.env == "TXBOX_DB" {
				args = []string{"relay", "--broker", "nats://127.0.0.1:1"}
			}
			_, _, err := run(context.Background(), args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s=%s: err = %v, want %q", tc.env, tc.val, err, tc.want)
			}
			// With the flag the relay gets as far as the broker, which it
			// waits for (logging each try) until its context ends.
			errOut, err := runUntil("connect to NATS", append(args, tc.flag...)...)
			if err != nil || !strings.Contains(errOut, "connect to NATS") {
				t.Errorf("%s=%s %v: err = %v, stderr %q; want the flag to win and the relay to try the broker", tc.env, tc.val, tc.flag, err, errOut)
			}
		})
	}
}
