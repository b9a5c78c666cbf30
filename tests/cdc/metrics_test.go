package cdc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx/cdc"
	"github.com/txbox/txbox/txboxprom"
)

// gauges gathers reg's gauges by name and label value ("" when none).
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	testenv.Must(t, err, "gather")
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			if g := m.GetGauge(); g != nil {
				out[name] = g.GetValue()
			}
		}
	}
	return out
}

// The reading relay samples its slot into txboxprom's gauges: lag in
// bytes and seconds, wal_status and safe_wal_size. A parked key holds the
// confirmed LSN back: both lags grow; once it is released they fall to 0.
func TestSlotLagMetrics(t *testing.T) {
	t.Parallel()
	_, pool := logicalCluster(t, "max_slot_wal_keep_size=1GB")
	m := txboxprom.New(txboxprom.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	cfg := relaytest.With(cdc.Config{MaxAttempts: 1 << 20, Observer: m.Relay()}, relaytest.Config{SampleInterval: 50 * time.Millisecond})
	l, _ := poisoned(t, pool, cfg, "k00:1", "poison for now")
	writers(t, pool, 2, 10, keysOf(2))
	eventually(t, "the lag of the parked key in the gauges", func() (bool, string) {
		g := gauges(t, reg)
		ok := g["txbox_relay_slot_lag_bytes"] > 0 && g["txbox_relay_slot_lag_seconds"] > 0 &&
			g["txbox_relay_slot_wal_status{reserved}"] == 1 && g["txbox_relay_slot_wal_status{lost}"] == 0 &&
			g["txbox_relay_slot_safe_wal_size_bytes"] > 0
		return ok, fmt.Sprint(g["txbox_relay_slot_lag_bytes"], g["txbox_relay_slot_lag_seconds"],
			g["txbox_relay_slot_wal_status{reserved}"], g["txbox_relay_slot_safe_wal_size_bytes"])
	})
	l.setFail(nil)
	delivered(t, l, pool)
	eventually(t, "no lag once the key is released", func() (bool, string) {
		g := gauges(t, reg)
		return g["txbox_relay_slot_lag_bytes"] < 1<<20 && g["txbox_relay_slot_lag_seconds"] == 0,
			fmt.Sprint(g["txbox_relay_slot_lag_bytes"], g["txbox_relay_slot_lag_seconds"])
	})
	st := slot(t, pool, cfg)
	if st.FlushLagSeconds < -1 {
		t.Fatalf("flush lag %v", st.FlushLagSeconds)
	}
}
