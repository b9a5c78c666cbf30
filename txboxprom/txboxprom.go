// Package txboxprom exposes a txbox relay, consumer and inbox as Prometheus
// metrics (client_golang), through the core's observer seam
// (txbox.RelayObserver, txbox.ConsumerObserver, inbox.Hook): the core
// imports no metrics SDK; this module does.
//
//	m := txboxprom.New(txboxprom.Config{})
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(m)
//	r, _ := relay.New(drv, pub, relay.Config{Observer: m.Relay()})
//	http.Handle("/", health.Handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), health.RelayCheck(...)))
//
// The backlog gauges come from the relay's own periodic sample (one query
// every 10 seconds), never from a query per scrape. Topic
// labels are bounded: the first Config.MaxTopics topics seen (or those of
// Config.Topics) get their own label value, every other topic is counted as
// "other". docs/reference/metrics.md lists every metric.
//
// One Metrics serves one relay (its gauges hold that relay's sample) and any
// number of consumers (their series are labelled by handler name). For
// several relays in one process, give each its own Metrics with a
// distinguishing Config.ConstLabels.
package txboxprom

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultMaxTopics = 50
	// OtherTopic is the topic label of the topics past MaxTopics.
	OtherTopic = "other"
)

// DefaultLatencyBuckets are the buckets of the commit-to-ack histogram, in
// seconds: from a millisecond (a relay woken by NOTIFY) to an hour (a
// backlog after an outage).
var DefaultLatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Config configures Metrics. Zero fields take their defaults.
type Config struct {
	// MaxTopics bounds the topic label's values: the first MaxTopics
	// topics seen get their own, the rest are "other". Default: 50.
	MaxTopics int
	// Topics, when set, are the only topics with their own label value
	// (MaxTopics is then ignored).
	Topics []string
	// LatencyBuckets are the commit-to-ack histogram's buckets, in
	// seconds. Default: DefaultLatencyBuckets.
	LatencyBuckets []float64
	// ConstLabels are added to every metric (e.g. {"relay": "orders"}).
	ConstLabels prometheus.Labels
}

// Metrics holds the txbox metrics. It is a prometheus.Collector: register
// it with a registry.
type Metrics struct {
	cfg    Config
	fixed  map[string]bool // Config.Topics, or nil
	topics sync.Map        // topic -> *topicSeries
	nTopic atomic.Int64
	other  *topicSeries

	// relay
	published, rejected, dead, invalid, unacked *prometheus.CounterVec
	commitToAck, claimDuration, publishDuration prometheus.Histogram
	batchSize                                   prometheus.Histogram
	roundsFailed                                *prometheus.CounterVec
	backlog                                     *prometheus.GaugeVec
	oldestClaimable, oldestInFlight             prometheus.Gauge
	listening, connected, lastSample            prometheus.Gauge
	sampleErrors                                prometheus.Counter
	duplicatesDesc                              *prometheus.Desc
	duplicates                                  atomic.Int64
	dups                                        dupSeen // of the relay this Metrics observes

	// consumer and inbox
	received                    *prometheus.CounterVec
	handled                     *prometheus.CounterVec
	unrouted                    *prometheus.CounterVec
	handlerDuration, deliveries *prometheus.HistogramVec
	inFlight                    *prometheus.GaugeVec
	handlers                    sync.Map // handler name -> *handlerSeries
	swept, sweeps               *prometheus.CounterVec
	receipts                    *prometheus.GaugeVec
	inboxSampleErrors           prometheus.Counter

	collectors []prometheus.Collector
	// sampled are the gauges of the relay's sample, collected only once
	// there has been one: absent, not 0, while the figures are unknown;
	// upkept those of RelaySample.Upkeep (PostgreSQL), once a sample had
	// them.
	sampled, upkept          gated
	oldestSnapshot, deadRows prometheus.Gauge
	// slotted are the log-based relay's slot gauges (SlotSample), once a
	// slot sample had them.
	slotted                                   gated
	slotLagBytes, slotLagSeconds, slotSafeWAL prometheus.Gauge
	slotWALStatus                             *prometheus.GaugeVec
	slotSampleErrors                          prometheus.Counter
}

// New returns the metrics, unregistered.
func New(cfg Config) *Metrics {
	if cfg.MaxTopics <= 0 {
		cfg.MaxTopics = DefaultMaxTopics
	}
	if len(cfg.LatencyBuckets) == 0 {
		cfg.LatencyBuckets = DefaultLatencyBuckets
	}
	m := &Metrics{cfg: cfg}
	if len(cfg.Topics) > 0 {
		m.fixed = map[string]bool{}
		for _, t := range cfg.Topics {
			m.fixed[t] = true
		}
	}
	cl := cfg.ConstLabels
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, labels)
		m.collectors = append(m.collectors, v)
		return v
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: cl})
		m.collectors = append(m.collectors, g)
		return g
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: cl})
		m.collectors = append(m.collectors, h)
		return h
	}
	durations := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

	m.published = counter("txbox_relay_published_total", "Messages the broker acknowledged and the relay marked, by topic.", "topic")
	m.rejected = counter("txbox_relay_rejected_total", "Broker rejections (each costs the message an attempt; the message is retried), by topic.", "topic")
	m.dead = counter("txbox_relay_dead_total", "Messages the relay marked dead (went dead: after their last rejection, or invalid), by topic.", "topic")
	m.invalid = counter("txbox_relay_invalid_total", "Rows that broke the outbox contract, marked dead at once (also in txbox_relay_dead_total), by topic.", "topic")
	m.unacked = counter("txbox_relay_unacked_total", "Messages the broker did not answer (outage, timeout), given back untouched, by topic.", "topic")
	m.commitToAck = histogram("txbox_relay_commit_to_ack_seconds", "Time from a row's created_at to the record of the broker's ack.", cfg.LatencyBuckets)
	m.claimDuration = histogram("txbox_relay_claim_duration_seconds", "Duration of one claim query.", durations)
	m.publishDuration = histogram("txbox_relay_publish_duration_seconds", "Duration of one batch's publish, to the last ack.", durations)
	m.batchSize = histogram("txbox_relay_batch_size", "Rows returned by one claim (0 for an idle poll).", []float64{0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000})
	m.roundsFailed = counter("txbox_relay_rounds_failed_total", "Rounds that failed, by stage (claim, publish, finish).", "stage")
	m.backlog = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "txbox_relay_backlog",
		Help: "Outbox rows by state, from the relay's periodic sample: pending, retrying and parked (outstanding), dead; see docs/reference/glossary.md.", ConstLabels: cl}, []string{"state"})
	sampledFrom := len(m.collectors)
	m.oldestClaimable = gauge("txbox_relay_oldest_claimable_age_seconds", "Age of the oldest row a claim could take now (due, not parked); 0 when none.")
	m.oldestInFlight = gauge("txbox_relay_oldest_in_flight_age_seconds", "How long the oldest batch this relay holds has been claimed; 0 when none.")
	m.listening = gauge("txbox_relay_listening", "1 while the relay receives LISTEN/NOTIFY wake-ups, 0 while it polls.")
	m.connected = gauge("txbox_relay_broker_connected", "1 while the publisher's broker connection is up (always 1 for publishers that do not report it).")
	m.lastSample = gauge("txbox_relay_last_sample_timestamp_seconds", "Unix time of the last successful backlog sample.")
	m.sampled.cs = append([]prometheus.Collector{m.backlog}, m.collectors[sampledFrom:]...)
	m.collectors = slices.Clip(m.collectors[:sampledFrom])
	upkeepFrom := len(m.collectors)
	m.oldestSnapshot = gauge("txbox_relay_oldest_transaction_age_seconds",
		"PostgreSQL: how long the database's oldest transaction holding a snapshot has been open (0: none); VACUUM removes no row version newer than it, so delivered rows' index entries stay in the claims' way.")
	m.deadRows = gauge("txbox_relay_table_dead_rows", "PostgreSQL: the outbox table's row versions to vacuum (dead tuples, PostgreSQL's estimate; not dead messages).")
	m.upkept.cs = slices.Clone(m.collectors[upkeepFrom:])
	m.collectors = slices.Clip(m.collectors[:upkeepFrom])
	slotFrom := len(m.collectors)
	m.slotLagBytes = gauge("txbox_relay_slot_lag_bytes", "Log-based relay: WAL bytes between the server's current position and the slot's confirmed LSN (pg_current_wal_lsn() - confirmed_flush_lsn).")
	m.slotLagSeconds = gauge("txbox_relay_slot_lag_seconds", "Log-based relay: how long the oldest event the relay holds unsettled has waited since its commit; 0 when none.")
	m.slotSafeWAL = gauge("txbox_relay_slot_safe_wal_size_bytes", "Log-based relay: WAL bytes that may still be written before the slot risks losing WAL (safe_wal_size); -1 when unbounded.")
	m.slotWALStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "txbox_relay_slot_wal_status",
		Help: "Log-based relay: 1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others.", ConstLabels: cl}, []string{"status"})
	m.slotted.cs = append(slices.Clone(m.collectors[slotFrom:]), m.slotWALStatus)
	m.collectors = slices.Clip(m.collectors[:slotFrom])
	m.slotSampleErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "txbox_relay_slot_sample_errors_total", Help: "Log-based relay: slot samples that could not read the slot.", ConstLabels: cl})
	m.collectors = append(m.collectors, m.slotSampleErrors)
	m.sampleErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "txbox_relay_sample_errors_total", Help: "Backlog samples that could not read the table.", ConstLabels: cl})
	m.collectors = append(m.collectors, m.sampleErrors)
	m.duplicatesDesc = prometheus.NewDesc("txbox_relay_broker_duplicates_total",
		"Acks of the relay's publishes in which the broker said it already held the message (JetStream duplicates).", nil, cl)

	m.received = counter("txbox_consumer_received_total", "Deliveries handed to a handler, by handler.", "handler")
	m.handled = counter("txbox_consumer_handled_total", "Deliveries by handler and result (fresh, duplicate, failed, dead_lettered, released).", "handler", "result")
	m.unrouted = counter("txbox_consumer_unrouted_total", "Deliveries no route of their binding claimed, by binding and action (dead_lettered, acked).", "binding", "action")
	m.handlerDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "txbox_consumer_handler_duration_seconds",
		Help: "Time from a delivery's receipt to its settlement (handler, inbox transaction, ack), by handler.", Buckets: durations, ConstLabels: cl}, []string{"handler"})
	m.deliveries = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "txbox_consumer_deliveries",
		Help: "The broker's delivery count of each delivery received (1 for a first delivery), by handler.", Buckets: []float64{1, 2, 3, 5, 10, 20, 50}, ConstLabels: cl}, []string{"handler"})
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "txbox_consumer_in_flight", Help: "Deliveries being processed now, by handler.", ConstLabels: cl}, []string{"handler"})
	m.collectors = append(m.collectors, m.handlerDuration, m.deliveries, m.inFlight)
	m.swept = counter("txbox_inbox_swept_total", "Inbox receipts deleted by Sweep, by table.", "table")
	m.sweeps = counter("txbox_inbox_sweeps_total", "Inbox sweeps, by table and result (ok, error).", "table", "result")
	m.receipts = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "txbox_inbox_receipts",
		Help: "Inbox receipts by source and state (processed, pending), from a periodic sample (WatchInbox).", ConstLabels: cl}, []string{"source", "state"})
	m.inboxSampleErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "txbox_inbox_sample_errors_total", Help: "Inbox samples that could not read the table.", ConstLabels: cl})
	m.collectors = append(m.collectors, m.receipts, m.inboxSampleErrors)
	m.other = m.newSeries(OtherTopic)
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
	m.sampled.describe(ch)
	m.upkept.describe(ch)
	m.slotted.describe(ch)
	ch <- m.duplicatesDesc
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
	m.sampled.collect(ch)
	m.upkept.collect(ch)
	m.slotted.collect(ch)
	ch <- prometheus.MustNewConstMetric(m.duplicatesDesc, prometheus.CounterValue, float64(m.duplicates.Load()))
}

// gated are collectors served only once on is set.
type gated struct {
	cs []prometheus.Collector
	on atomic.Bool
}

func (g *gated) describe(ch chan<- *prometheus.Desc) {
	for _, c := range g.cs {
		c.Describe(ch)
	}
}

func (g *gated) collect(ch chan<- prometheus.Metric) {
	if g.on.Load() {
		for _, c := range g.cs {
			c.Collect(ch)
		}
	}
}

// topicSeries are one topic label value's counters, resolved once.
type topicSeries struct {
	published, rejected, dead, invalid, unacked prometheus.Counter
}

// series returns topic's counters, or those of "other" once MaxTopics
// topics have their own: a lookup without allocation after the first.
func (m *Metrics) series(topic string) *topicSeries {
	if s, ok := m.topics.Load(topic); ok {
		return s.(*topicSeries)
	}
	if m.fixed != nil && !m.fixed[topic] || topic == OtherTopic {
		return m.other
	}
	if m.fixed == nil && m.nTopic.Add(1) > int64(m.cfg.MaxTopics) {
		m.nTopic.Add(-1)
		return m.other
	}
	actual, loaded := m.topics.LoadOrStore(topic, m.newSeries(topic))
	if loaded && m.fixed == nil {
		m.nTopic.Add(-1) // another goroutine stored it first
	}
	return actual.(*topicSeries)
}

func (m *Metrics) newSeries(label string) *topicSeries {
	return &topicSeries{
		published: m.published.WithLabelValues(label), rejected: m.rejected.WithLabelValues(label),
		dead: m.dead.WithLabelValues(label), invalid: m.invalid.WithLabelValues(label), unacked: m.unacked.WithLabelValues(label),
	}
}
