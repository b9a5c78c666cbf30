package cli_test

import (
	"context"
	"strings"
	"testing"
)

// --claim-lease and OUTBOX_CLAIM_LEASE are bounded (1s to 2h) and must
// exceed the publish timeout in force, whichever source set each; the flag
// wins over the variable, which is then not read.
func TestClaimLeaseSetting(t *testing.T) {
	db := emptySQLite(t, "l.db")
	relay := []string{"relay", "--db", db, "--broker", "nats://127.0.0.1:1"}
	for _, tc := range []struct {
		env  string // OUTBOX_CLAIM_LEASE, or ""
		args []string
		want string
	}{
		{"", []string{"--claim-lease", "100ms"}, "--claim-lease 100ms: must be at least 1s"},
		{"", []string{"--claim-lease", "3h"}, "--claim-lease 3h0m0s: must be at most 2h0m0s"},
		{"", []string{"--claim-lease", "10s"}, "--claim-lease 10s: must exceed the publish timeout 10s"},
		{"", []string{"--claim-lease", "5s", "--publish-timeout", "5s"}, "--claim-lease 5s: must exceed the publish timeout 5s"},
		{"soon", nil, `OUTBOX_CLAIM_LEASE="soon": not a duration`},
		{"9s", nil, `OUTBOX_CLAIM_LEASE="9s": must exceed the publish timeout 10s`},
		{"2s", []string{"--publish-timeout", "3s"}, `OUTBOX_CLAIM_LEASE="2s": must exceed the publish timeout 3s`},
		// Accepted: the relay gets as far as the broker.
		{"", []string{"--claim-lease", "11s"}, "connect to NATS"},
		{"", []string{"--publish-timeout", "1h"}, "connect to NATS"}, // the default lease follows: 1h0m5s
		{"soon", []string{"--claim-lease", "30s"}, "connect to NATS"},
		{"1s", []string{"--claim-lease", "30s"}, "connect to NATS"},
		{"20s", nil, "connect to NATS"},
	} {
		t.Run(strings.Join(append([]string{tc.env}, tc.args...), " "), func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("OUTBOX_CLAIM_LEASE", tc.env)
			}
			accepted := tc.want == "connect to NATS"
			var stderr string
			var err error
			if accepted {
				// An accepted setting gets the relay as far as the broker,
				// which it then waits for: stop it after its first try.
				stderr, err = runUntil(tc.want, append(append([]string{}, relay...), tc.args...)...)
			} else {
				_, stderr, err = run(context.Background(), append(append([]string{}, relay...), tc.args...)...)
			}
			if accepted {
				if !strings.Contains(stderr, tc.want) {
					t.Errorf("OUTBOX_CLAIM_LEASE=%q %q: err = %v, stderr %q, want a try to %s", tc.env, tc.args, err, stderr, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("OUTBOX_CLAIM_LEASE=%q %q: err = %v, want %q", tc.env, tc.args, err, tc.want)
			}
		})
	}
}
