package cdc

import (
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
)

func TestSlotNames(t *testing.T) {
	for _, c := range []struct {
		cfg        Config
		slot, pub  string
		invalidCfg bool
	}{
		{cfg: Config{}, slot: "txbox_outbox_cdc", pub: "txbox_outbox_cdc"},
		{cfg: Config{Table: "Orders_Outbox"}, slot: "orders_outbox_cdc", pub: "orders_outbox_cdc"},
		{cfg: Config{Slot: "s1", Publication: "Pub"}, slot: "s1", pub: "Pub"},
		{cfg: Config{Slot: "Upper"}, invalidCfg: true},
		{cfg: Config{Slot: "a-b"}, invalidCfg: true},
		{cfg: Config{Publication: "x y"}, invalidCfg: true},
		{cfg: Config{Table: "t;drop"}, invalidCfg: true},
	} {
		slot, pub, err := c.cfg.SlotNames()
		if c.invalidCfg {
			if !errors.Is(err, txbox.ErrInvalidConfig) {
				t.Errorf("%+v: got %q %q %v, want an invalid config", c.cfg, slot, pub, err)
			}
			continue
		}
		if err != nil || slot != c.slot || pub != c.pub {
			t.Errorf("%+v: got %q %q %v, want %q %q", c.cfg, slot, pub, err, c.slot, c.pub)
		}
	}
}

func TestConfigBounds(t *testing.T) {
	if _, err := (&Config{BatchSize: -1}).withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("negative batch size: %v", err)
	}
	if _, err := (&Config{LeaseTimeout: 10}).withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("a lease timeout under 1s: %v", err)
	}
	c, err := (&Config{}).withDefaults()
	if err != nil || c.BatchSize != DefaultBatchSize || c.LeaseTimeout != DefaultLeaseTimeout || c.Logger == nil {
		t.Errorf("defaults: %+v %v", c, err)
	}
}

// Cleanup runs every hour, or every Retention when that is shorter (at
// least every second); the slot is sampled every 10 s; tests set both.
func TestDerivedIntervals(t *testing.T) {
	for _, c := range []struct {
		retention, cleanup time.Duration
	}{
		{0, time.Hour}, // the default retention, 168h
		{2 * time.Hour, time.Hour},
		{10 * time.Minute, 10 * time.Minute},
		{time.Millisecond, time.Second},
	} {
		got, err := (&Config{Retention: c.retention}).withDefaults()
		if err != nil || got.test.CleanupInterval != c.cleanup || got.test.SampleInterval != 10*time.Second {
			t.Errorf("retention %s: cleanup every %s, samples every %s (%v), want cleanup every %s, samples every 10s",
				c.retention, got.test.CleanupInterval, got.test.SampleInterval, err, c.cleanup)
		}
	}
	cfg := relaytest.With(Config{}, relaytest.Config{CleanupInterval: time.Millisecond, SampleInterval: 2 * time.Millisecond})
	got, err := cfg.withDefaults()
	if err != nil || got.test.CleanupInterval != time.Millisecond || got.test.SampleInterval != 2*time.Millisecond {
		t.Errorf("test settings: %+v %v", got.test, err)
	}
	cfg = relaytest.With(Config{}, relaytest.Config{SampleInterval: -1})
	if _, err := cfg.withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("a negative sample interval: %v", err)
	}
}
