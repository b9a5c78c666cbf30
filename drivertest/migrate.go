package drivertest

import (
	"context"
	"errors"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/txboxmigrate"
)

func (s *suite[TTx]) testMigrate(t *testing.T) {
	ctx := context.Background()
	drv := s.newDriver(t)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{"inbox_a", "inbox_b"}})
	must(t, err, "txboxmigrate.New")
	st, err := m.Status(ctx)
	must(t, err, "status before up")
	for _, x := range st {
		if !x.AppliedAt.IsZero() {
			t.Fatalf("%s v%d applied before Up", x.Target, x.Version)
		}
	}
	applied, err := m.Up(ctx)
	must(t, err, "up")
	if len(applied) != len(st) || len(applied) == 0 {
		t.Fatalf("Up applied %d of %d migrations", len(applied), len(st))
	}
	again, err := m.Up(ctx)
	must(t, err, "second up")
	if len(again) != 0 {
		t.Fatalf("second Up applied %d migrations, want none", len(again))
	}
	pending, err := m.Pending(ctx)
	must(t, err, "pending")
	if len(pending) != 0 {
		t.Fatalf("%d migrations pending after Up", len(pending))
	}
	st, err = m.Status(ctx)
	must(t, err, "status")
	for _, x := range st {
		if x.AppliedAt.IsZero() {
			t.Fatalf("%s v%d not recorded as applied", x.Target, x.Version)
		}
	}
	// The tables work: one message and one receipt.
	ob := outbox(t, drv)
	add(t, drv, ob, true, txbox.Message{Topic: "t", Payload: []byte("x")})
	for _, table := range []string{"inbox_a", "inbox_b"} {
		ib, err := inbox.New(drv, inbox.Config{Table: table, Hook: func(context.Context, inbox.Event) {}})
		must(t, err, "inbox.New")
		res, err := ib.Handle(ctx, "src", "m1", nil, func(context.Context, TTx) error { return nil })
		if err != nil || res != inbox.Fresh {
			t.Fatalf("%s: Handle = %v, %v", table, res, err)
		}
	}
	// Down through the driver: refused while the tables hold a message and
	// receipts, then forced; Up brings every migration back.
	if _, err := m.Down(ctx, txboxmigrate.DownOptions{}); !errors.Is(err, txboxmigrate.ErrDataLoss) {
		t.Fatalf("Down to 0 with a pending message: %v, want txboxmigrate.ErrDataLoss", err)
	}
	reverted, err := m.Down(ctx, txboxmigrate.DownOptions{Force: true})
	must(t, err, "forced down")
	if len(reverted) != len(st) {
		t.Fatalf("Down reverted %d of %d migrations", len(reverted), len(st))
	}
	if pending, err = m.Pending(ctx); err != nil || len(pending) != len(st) {
		t.Fatalf("after Down to 0: %d of %d migrations pending (%v)", len(pending), len(st), err)
	}
	applied, err = m.Up(ctx)
	must(t, err, "up after down")
	if len(applied) != len(st) {
		t.Fatalf("Up after Down applied %d of %d migrations", len(applied), len(st))
	}
}
