package cli

import (
	"testing"
	"time"

	"github.com/txbox/txbox/relay"
)

// A retention of 0, from the flag or TXBOX_RETENTION, deletes (relay.DeletePublished) rows as they
// are delivered; the flag overrides the environment both ways.
func TestRelayConfigRetention(t *testing.T) {
	for _, tc := range []struct {
		env     string
		args    []string
		deletes bool
		keep    time.Duration
	}{
		{args: nil, keep: 0},
		{args: []string{"--retention", "0"}, deletes: true},
		{args: []string{"--retention", "2h"}, keep: 2 * time.Hour},
		{env: "0", deletes: true},
		{env: "0s", args: []string{"--retention", "3h"}, keep: 3 * time.Hour},
		{env: "5h", args: []string{"--retention", "0"}, deletes: true},
	} {
		if tc.env != "" {
			t.Setenv(EnvRetention, tc.env)
		}
		cmd := newRelayCmd()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		var f relayFlags
		f.retention, _ = cmd.Flags().GetDuration("retention")
		cfg, err := relayConfig(cmd, &f)
		if err != nil {
			t.Fatalf("env %q args %v: %v", tc.env, tc.args, err)
		}
		want := tc.keep
		if tc.deletes {
			want = relay.DeletePublished
		}
		if cfg.Retention != want {
			t.Errorf("env %q args %v: Retention %s; want %s", tc.env, tc.args, cfg.Retention, want)
		}
	}
}
