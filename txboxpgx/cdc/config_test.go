package cdc

import (
	"errors"
	"testing"

	"github.com/txbox/txbox"
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
