package txboxprom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txbox/txbox"
)

// Each store counts under its own label value up to MaxStores; the rest add
// up under "other", which takes no backlog sample.
func TestStoresLabelsAreBounded(t *testing.T) {
	s := NewStores(StoresConfig{MaxStores: 2, Metrics: Config{ConstLabels: prometheus.Labels{"relay": "r1"}}})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b", "c", "d", "a"} {
		o := s.Relay(name)
		for range i + 1 {
			o.Settled("orders", txbox.OutcomePublished, time.Millisecond)
		}
		o.Sampled(txbox.RelaySample{At: time.Now(), Pending: int64(10 * (i + 1))})
	}
	want := `
# HELP txbox_relay_published_total Messages the broker acknowledged and the relay marked, by topic.
# TYPE txbox_relay_published_total counter
txbox_relay_published_total{relay="r1",store="a",topic="orders"} 6
txbox_relay_published_total{relay="r1",store="a",topic="other"} 0
txbox_relay_published_total{relay="r1",store="b",topic="orders"} 2
txbox_relay_published_total{relay="r1",store="b",topic="other"} 0
txbox_relay_published_total{relay="r1",store="other",topic="orders"} 7
txbox_relay_published_total{relay="r1",store="other",topic="other"} 0
# HELP txbox_relay_backlog Outbox rows by state, from the relay's periodic sample: pending, retrying and parked (outstanding), dead; see docs/reference/glossary.md.
# TYPE txbox_relay_backlog gauge
txbox_relay_backlog{relay="r1",state="dead",store="a"} 0
txbox_relay_backlog{relay="r1",state="dead",store="b"} 0
txbox_relay_backlog{relay="r1",state="parked",store="a"} 0
txbox_relay_backlog{relay="r1",state="parked",store="b"} 0
txbox_relay_backlog{relay="r1",state="pending",store="a"} 50
txbox_relay_backlog{relay="r1",state="pending",store="b"} 20
txbox_relay_backlog{relay="r1",state="retrying",store="a"} 0
txbox_relay_backlog{relay="r1",state="retrying",store="b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "txbox_relay_published_total", "txbox_relay_backlog"); err != nil {
		t.Fatal(err)
	}
	if got := len(s.stores); got != 2 {
		t.Fatalf("%d stores with their own series, want 2", got)
	}
}

// With no more stores than MaxStores, no store="other" series is served.
func TestStoresNoOtherUnlessUsed(t *testing.T) {
	s := NewStores(StoresConfig{MaxStores: 3})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		s.Relay(name).Settled("orders", txbox.OutcomePublished, time.Millisecond)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	stores := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == DefaultStoreLabel {
					stores[l.GetValue()] = true
				}
			}
		}
	}
	if len(stores) != 3 || stores[OtherStore] {
		t.Fatalf("series of stores %v, want a, b and c only", stores)
	}
	// A removed store's series go, and its place is free: a fourth store
	// gets series of its own, not "other".
	s.Remove("b")
	s.Relay("d").Settled("orders", txbox.OutcomePublished, time.Millisecond)
	want := `
# HELP txbox_relay_published_total Messages the broker acknowledged and the relay marked, by topic.
# TYPE txbox_relay_published_total counter
txbox_relay_published_total{store="a",topic="orders"} 1
txbox_relay_published_total{store="a",topic="other"} 0
txbox_relay_published_total{store="c",topic="orders"} 1
txbox_relay_published_total{store="c",topic="other"} 0
txbox_relay_published_total{store="d",topic="orders"} 1
txbox_relay_published_total{store="d",topic="other"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "txbox_relay_published_total"); err != nil {
		t.Fatal(err)
	}
}

// Each store's broker duplicates count under its label, from its own
// relay's samples, also past MaxStores, where they add up under "other"
// (two relays there, one made anew and counting from 0 again).
func TestStoresCountDuplicates(t *testing.T) {
	s := NewStores(StoresConfig{MaxStores: 1})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	sample := func(o txbox.RelayObserver, n int64) {
		o.Sampled(txbox.RelaySample{At: time.Now(), BrokerDuplicates: n})
	}
	a, b, c := s.Relay("a"), s.Relay("b"), s.Relay("c")
	sample(a, 1)
	sample(a, 4)
	sample(b, 2)
	sample(c, 3)
	sample(b, 5)
	sample(c, 1) // c's relay made anew: 1 more
	want := `
# HELP txbox_relay_broker_duplicates_total Acks of the relay's publishes in which the broker said it already held the message (JetStream duplicates).
# TYPE txbox_relay_broker_duplicates_total counter
txbox_relay_broker_duplicates_total{store="a"} 4
txbox_relay_broker_duplicates_total{store="other"} 9
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "txbox_relay_broker_duplicates_total"); err != nil {
		t.Fatal(err)
	}
}
