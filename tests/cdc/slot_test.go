package cdc_test

import (
	"os/exec"
	"strings"
	"testing"
)

// txbox slot status exits 1 while the slot is missing, create makes it,
// drop needs --yes, and relay --cdc refuses a missing slot with the
// command that creates it.
func TestSlotCommands(t *testing.T) {
	t.Parallel()
	bin := buildTxbox(t)
	_, pool := logicalCluster(t)
	url := pool.Config().ConnString()
	txbox := func(wantOK bool, args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--db", url)...).CombinedOutput()
		if (err == nil) != wantOK {
			t.Fatalf("txbox %s: err %v, want ok %v\n%s", strings.Join(args, " "), err, wantOK, out)
		}
		return string(out)
	}
	out := txbox(false, "slot", "status")
	if !strings.Contains(out, "exists") || !strings.Contains(out, "txbox slot create") {
		t.Fatalf("status of a missing slot:\n%s", out)
	}
	out = txbox(false, "relay", "--cdc", "--broker", "nats://127.0.0.1:1")
	if !strings.Contains(out, "txbox slot create") {
		t.Fatalf("relay --cdc on a missing slot:\n%s", out)
	}
	out = txbox(true, "slot", "create")
	for _, want := range []string{"txbox_outbox_cdc", "pgoutput", "wal_status", "publishes the outbox table: yes"} {
		if !strings.Contains(out, want) {
			t.Fatalf("create does not print %q:\n%s", want, out)
		}
	}
	txbox(true, "slot", "status")
	txbox(true, "slot", "create") // again: nothing to do
	if out := txbox(false, "slot", "drop"); !strings.Contains(out, "--yes") {
		t.Fatalf("drop without --yes:\n%s", out)
	}
	txbox(true, "slot", "drop", "--yes")
	txbox(false, "slot", "status")
}
