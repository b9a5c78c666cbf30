package cli_test

import (
	"context"
	"strings"
	"testing"
)

// TestEnvPrefix: the relay's variables are TXBOX_*; the old OUTBOX_ names
// still work, with a deprecation line, and the TXBOX_ name wins when both
// are set. Errors name the variable the value came from.
func TestEnvPrefix(t *testing.T) {
	ctx := context.Background()
	t.Setenv("TXBOX_BATCH_SIZE", "-1")
	if _, _, err := run(ctx, "relay", "--db", "sqlite://"+t.TempDir()+"/x.db"); err == nil || !strings.Contains(err.Error(), `TXBOX_BATCH_SIZE="-1"`) {
		t.Fatalf("a bad TXBOX_BATCH_SIZE: %v", err)
	}
	t.Setenv("TXBOX_BATCH_SIZE", "")
	t.Setenv("OUTBOX_BATCH_SIZE", "-2")
	_, stderr, err := run(ctx, "relay", "--db", "sqlite://"+t.TempDir()+"/x.db")
	if err == nil || !strings.Contains(err.Error(), `OUTBOX_BATCH_SIZE="-2"`) {
		t.Fatalf("a bad OUTBOX_BATCH_SIZE: %v", err)
	}
	if !strings.Contains(stderr, "OUTBOX_BATCH_SIZE is deprecated, set TXBOX_BATCH_SIZE instead") {
		t.Fatalf("no deprecation line for OUTBOX_BATCH_SIZE:\n%s", stderr)
	}
	t.Setenv("TXBOX_BATCH_SIZE", "-3")
	if _, _, err := run(ctx, "relay", "--db", "sqlite://"+t.TempDir()+"/x.db"); err == nil || !strings.Contains(err.Error(), `TXBOX_BATCH_SIZE="-3"`) {
		t.Fatalf("TXBOX_BATCH_SIZE beside OUTBOX_BATCH_SIZE: %v, want the TXBOX_ value read", err)
	}
	t.Setenv("OUTBOX_SCHEMA", "")
	t.Setenv("TXBOX_SCHEMA", "nope")
	if _, _, err := run(ctx, "stats", "--db", "sqlite://"+t.TempDir()+"/y.db"); err == nil || !strings.Contains(err.Error(), "TXBOX_SCHEMA") {
		t.Fatalf("TXBOX_SCHEMA on SQLite: %v, want an error naming TXBOX_SCHEMA", err)
	}
}
