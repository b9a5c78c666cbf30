package txboxprom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txbox/txbox"
)

// The table's upkeep gauges are absent until a sample carries them
// (PostgreSQL), not 0: a relay on SQLite or MySQL never serves them.
func TestUpkeepGaugesOnlyOnceSampled(t *testing.T) {
	m := New(Config{})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	o := m.Relay()
	names := []string{"txbox_relay_oldest_transaction_age_seconds", "txbox_relay_table_dead_rows"}
	o.Sampled(txbox.RelaySample{At: time.Now(), Pending: 3})
	if n, err := testutil.GatherAndCount(reg, names...); err != nil || n != 0 {
		t.Fatalf("%d upkeep series (%v) after a sample without them, want none", n, err)
	}
	o.Sampled(txbox.RelaySample{At: time.Now(), Upkeep: true, OldestTransactionAge: 90 * time.Second, DeadRows: 1234})
	want := `
# HELP txbox_relay_oldest_transaction_age_seconds PostgreSQL: how long the database's oldest transaction holding a snapshot has been open (0: none); VACUUM removes no row version newer than it, so delivered rows' index entries stay in the claims' way.
# TYPE txbox_relay_oldest_transaction_age_seconds gauge
txbox_relay_oldest_transaction_age_seconds 90
# HELP txbox_relay_table_dead_rows PostgreSQL: the outbox table's row versions to vacuum (dead tuples, PostgreSQL's estimate; not dead messages).
# TYPE txbox_relay_table_dead_rows gauge
txbox_relay_table_dead_rows 1234
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// A later sample that could not read them keeps the last values.
	o.Sampled(txbox.RelaySample{At: time.Now()})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}
