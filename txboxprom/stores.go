package txboxprom

import (
	"maps"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox"
)

// Defaults of StoresConfig.
const (
	DefaultMaxStores = 100
	// DefaultStoreLabel is the label that names a store.
	DefaultStoreLabel = "store"
	// OtherStore is the store label of the stores past MaxStores.
	OtherStore = "other"
)

// StoresConfig configures Stores. Zero fields take their defaults.
type StoresConfig struct {
	// Metrics configures each store's metrics (topics, buckets, constant
	// labels), as for New.
	Metrics Config
	// MaxStores bounds the store label's values: the first MaxStores
	// stores get their own, the others share OtherStore. Default: 100.
	MaxStores int
	// Label is the name of the label that holds the store's name.
	// Default: "store".
	Label string
}

// Stores holds the relay metrics of the stores of a relay.Group, one set of
// series per store, told apart by a label (store="acme"). The label's
// values are bounded: the first StoresConfig.MaxStores stores named get
// their own, every later one is counted under store="other", whose
// counters and histograms add up those stores and which has no backlog
// gauges (a gauge of several tables would be any one of them). So a group
// of N stores makes at most MaxStores+1 times the series of one relay.
//
// Stores is a prometheus.Collector: register it once. It is an unchecked
// collector (Describe sends nothing), since stores come and go while the
// registry serves; each store's series are those of Metrics.
type Stores struct {
	cfg StoresConfig

	mu        sync.Mutex
	stores    map[string]*Metrics
	other     *Metrics
	otherUsed bool // a store was counted under other: its series are collected
}

var _ prometheus.Collector = (*Stores)(nil)

// NewStores returns the metrics of a group's stores, unregistered.
func NewStores(cfg StoresConfig) *Stores {
	if cfg.MaxStores <= 0 {
		cfg.MaxStores = DefaultMaxStores
	}
	if cfg.Label == "" {
		cfg.Label = DefaultStoreLabel
	}
	s := &Stores{cfg: cfg, stores: map[string]*Metrics{}}
	s.other = s.newMetrics(OtherStore)
	return s
}

func (s *Stores) newMetrics(store string) *Metrics {
	c := s.cfg.Metrics
	c.ConstLabels = maps.Clone(c.ConstLabels)
	if c.ConstLabels == nil {
		c.ConstLabels = prometheus.Labels{}
	}
	c.ConstLabels[s.cfg.Label] = store
	return New(c)
}

// Relay returns the observer of the named store, to set in its
// relay.Config.Observer. The first MaxStores names get series of their own
// (a name asked for again gets the same ones); later names, and the name
// "other", are counted under store="other", without backlog gauges.
func (s *Stores) Relay(store string) txbox.RelayObserver {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.stores[store]; ok {
		return m.Relay()
	}
	if store == OtherStore || len(s.stores) >= s.cfg.MaxStores {
		s.otherUsed = true
		return &otherObserver{RelayObserver: s.other.Relay(), m: s.other}
	}
	m := s.newMetrics(store)
	s.stores[store] = m
	return m.Relay()
}

// Remove drops the named store's series (a store taken out of the group):
// they are no longer collected, and its label value is free for another
// store. Its observer, if still used, counts into nothing collected.
func (s *Stores) Remove(store string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.stores, store)
}

// Describe sends nothing: Stores is an unchecked collector.
func (s *Stores) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (s *Stores) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	ms := make([]*Metrics, 0, len(s.stores)+1)
	for _, m := range s.stores {
		ms = append(ms, m)
	}
	if s.otherUsed {
		ms = append(ms, s.other)
	}
	s.mu.Unlock()
	for _, m := range ms {
		m.Collect(ch)
	}
}

// otherObserver counts a store past MaxStores under "other". Of its
// samples it keeps the broker duplicates its relay counted, which add up
// there like the other counters; the gauges it drops (a gauge of several
// tables would be any one of them).
type otherObserver struct {
	txbox.RelayObserver
	m    *Metrics
	dups dupSeen // of this store's relay
}

func (o *otherObserver) Sampled(s txbox.RelaySample) { o.dups.add(&o.m.duplicates, s.BrokerDuplicates) }
