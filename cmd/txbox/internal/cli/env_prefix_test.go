package cli_test

import (
	"context"
	"strings"
	"testing"
)

// TestEnvPrefix: the variables are TXBOX_* and no other prefix is read.
// Errors name the variable the value came from.
func TestEnvPrefix(t *testing.T) {
	ctx := context.Background()
	t.Setenv("TXBOX_BATCH_SIZE", "-1")
	if _, _, err := run(ctx, "relay", "--db", "sqlite://"+t.TempDir()+"/x.db"); err == nil || !strings.Contains(err.Error(), `TXBOX_BATCH_SIZE="-1"`) {
		t.Fatalf("a bad TXBOX_BATCH_SIZE: %v", err)
	}
	t.Setenv("TXBOX_BATCH_SIZE", "")
	t.Setenv("OUTBOX_BATCH_SIZE", "-2")
	t.Setenv("OUTBOX_SCHEMA", "nope")
	if stderr, err := runUntil("connect to NATS", "relay", "--db", emptySQLite(t, "z.db"), "--broker", "nats://127.0.0.1:1"); !strings.Contains(stderr, "connect to NATS") || strings.Contains(stderr, "OUTBOX_") {
		t.Fatalf("OUTBOX_BATCH_SIZE and OUTBOX_SCHEMA were read: err = %v, stderr:\n%s", err, stderr)
	}
	t.Setenv("TXBOX_SCHEMA", "nope")
	if _, _, err := run(ctx, "stats", "--db", "sqlite://"+t.TempDir()+"/y.db"); err == nil || !strings.Contains(err.Error(), "TXBOX_SCHEMA") {
		t.Fatalf("TXBOX_SCHEMA on SQLite: %v, want an error naming TXBOX_SCHEMA", err)
	}
}
