package drivertest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxmigrate"
)

// testClaimCheck: the claim check table through the driver. A payload over
// the threshold is stored in the caller's transaction (a rollback stores
// nothing; AddNoTx stores it at once) and the relay publishes the
// reference with an empty payload; one at the threshold travels inline.
// Get, Delete, Sweep and Check work on the dialect.
func (s *suite[TTx]) testClaimCheck(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{NoOutbox: true, ClaimCheckTables: []string{claimcheck.DefaultTable}})
	must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	must(t, err, "migrate up")
	store, err := claimcheck.New(drv, claimcheck.Config{})
	must(t, err, "claimcheck.New")
	if p := store.Check(ctx); len(p) != 0 {
		t.Fatalf("Check of a migrated table: %q", p)
	}
	missing, err := claimcheck.New(drv, claimcheck.Config{Table: "no_such_claims"})
	must(t, err, "claimcheck.New")
	if p := missing.Check(ctx); len(p) == 0 {
		t.Fatal("Check of a missing table found nothing")
	}
	const threshold = 1 << 10
	ob, err := txbox.New(drv, txbox.Config{ClaimCheck: store, ClaimCheckThreshold: threshold})
	must(t, err, "txbox.New")
	big := bytes.Repeat([]byte{0, 1, 2, 255}, 64<<10) // 256 KiB, bytes that are not text
	atThreshold := bytes.Repeat([]byte("i"), threshold)
	add(t, drv, ob, false, txbox.Message{ID: "rolled-back", Topic: "t", Payload: big})
	msgs := []txbox.Message{
		{ID: "big", Topic: "t", Payload: big, Headers: map[string]string{"X-A": "1"}},
		{ID: "inline", Topic: "t", Payload: atThreshold},
	}
	add(t, drv, ob, true, msgs...)
	if msgs[0].Headers[txbox.HeaderClaimCheck] != "" || len(msgs[0].Headers) != 1 || !bytes.Equal(msgs[0].Payload, big) {
		t.Fatal("Add changed the caller's message")
	}
	_, err = ob.AddNoTx(ctx, txbox.Message{ID: "notx", Topic: "t", Payload: big[:threshold+1]})
	must(t, err, "AddNoTx")
	if _, err := ob.AddNoTx(ctx, txbox.Message{Topic: "t", Payload: big, Headers: map[string]string{"txbox-claim-check": "mine"}}); !errors.Is(err, txbox.ErrInvalidMessage) {
		t.Fatalf("a claim check header of its own and a payload over the threshold: %v, want ErrInvalidMessage", err)
	}

	pub := &Recorder{}
	drain(t, newRelay(t, drv, pub, relay.Config{}))
	got := map[string]txbox.Message{}
	for _, g := range pub.Published() {
		got[g.ID] = g
	}
	if len(got) != 3 {
		t.Fatalf("published %d messages, want big, inline and notx", len(got))
	}
	if g := got["inline"]; !bytes.Equal(g.Payload, atThreshold) || g.Headers[txbox.HeaderClaimCheck] != "" {
		t.Fatalf("the payload at the threshold did not travel inline: %d bytes, headers %v", len(g.Payload), g.Headers)
	}
	for id, want := range map[string][]byte{"big": big, "notx": big[:threshold+1]} {
		g := got[id]
		ref := g.Headers[txbox.HeaderClaimCheck]
		if len(g.Payload) != 0 || ref == "" {
			t.Fatalf("%s: published %d bytes with headers %v, want none and a reference", id, len(g.Payload), g.Headers)
		}
		p, err := store.Get(ctx, ref)
		must(t, err, "get "+id)
		if !bytes.Equal(p, want) {
			t.Fatalf("%s: stored %d bytes, want the %d added", id, len(p), len(want))
		}
	}
	if got["big"].Headers["X-A"] != "1" {
		t.Fatalf("big lost its header: %v", got["big"].Headers)
	}
	if n, err := store.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep(1h) of fresh payloads = %d, %v; want 0", n, err)
	}
	ref := got["big"].Headers[txbox.HeaderClaimCheck]
	must(t, store.Delete(ctx, ref, "no-such-ref"), "delete")
	if _, err := store.Get(ctx, ref); !errors.Is(err, txbox.ErrClaimNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrClaimNotFound", err)
	}
}
