package txboxprom

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
)

// Relay returns the observer to set in relay.Config.Observer.
func (m *Metrics) Relay() txbox.RelayObserver { return relayObserver{m} }

// Consumer returns the observer to set in consumer.Config.Observer.
func (m *Metrics) Consumer() txbox.ConsumerObserver { return consumerObserver{m} }

var (
	_ prometheus.Collector   = (*Metrics)(nil)
	_ txbox.RelayObserver    = relayObserver{}
	_ txbox.ConsumerObserver = consumerObserver{}
	_ txbox.UnroutedObserver = consumerObserver{}
)

type relayObserver struct {
	m *Metrics
}

func (o relayObserver) Claimed(n int, d time.Duration) {
	o.m.claimDuration.Observe(d.Seconds())
	o.m.batchSize.Observe(float64(n))
}

func (o relayObserver) Published(n, failed int, d time.Duration) {
	o.m.publishDuration.Observe(d.Seconds())
}

func (o relayObserver) Settled(topic string, outcome txbox.Outcome, sinceCreated time.Duration) {
	s := o.m.series(topic)
	switch outcome {
	case txbox.OutcomePublished:
		s.published.Inc()
		o.m.commitToAck.Observe(sinceCreated.Seconds())
	case txbox.OutcomeRejected:
		s.rejected.Inc()
	case txbox.OutcomeDead:
		s.rejected.Inc()
		s.dead.Inc()
	case txbox.OutcomeInvalid:
		s.invalid.Inc()
		s.dead.Inc()
	case txbox.OutcomeUnacked:
		s.unacked.Inc()
	}
}

func (o relayObserver) RoundFailed(stage string) {
	o.m.roundsFailed.WithLabelValues(stage).Inc()
}

// SlotSampled sets the slot gauges of the log-based relay
// (txbox.SlotObserver).
func (o relayObserver) SlotSampled(s txbox.SlotSample) {
	m := o.m
	if s.Err != nil {
		m.slotSampleErrors.Inc()
		return
	}
	m.slotLagBytes.Set(float64(s.LagBytes))
	m.slotLagSeconds.Set(s.LagSeconds)
	m.slotSafeWAL.Set(float64(s.SafeWALSize))
	for _, st := range []string{"reserved", "extended", "unreserved", "lost"} {
		m.slotWALStatus.WithLabelValues(st).Set(b2f(s.WALStatus == st))
	}
	m.slotted.on.Store(true)
}

func (o relayObserver) Sampled(s txbox.RelaySample) {
	m := o.m
	if s.Err != nil {
		m.sampleErrors.Inc()
	} else {
		m.backlog.WithLabelValues("pending").Set(float64(s.Pending))
		m.backlog.WithLabelValues("retrying").Set(float64(s.Retrying))
		m.backlog.WithLabelValues("parked").Set(float64(s.Parked))
		m.backlog.WithLabelValues("dead").Set(float64(s.Dead))
		m.oldestClaimable.Set(s.OldestClaimableAge.Seconds())
		m.lastSample.Set(float64(s.At.UnixNano()) / 1e9)
	}
	if s.Upkeep {
		m.oldestSnapshot.Set(s.OldestTransactionAge.Seconds())
		m.deadRows.Set(float64(s.DeadRows))
		m.upkept.on.Store(true)
	}
	m.oldestInFlight.Set(s.OldestInFlightAge.Seconds())
	m.listening.Set(b2f(s.Listening))
	m.connected.Set(b2f(s.BrokerConnected))
	m.sampled.on.Store(true)
	m.dups.add(&m.duplicates, s.BrokerDuplicates)
}

// dupSeen turns a relay's running count of broker duplicates, read at each
// sample, into additions to a counter.
type dupSeen struct {
	mu   sync.Mutex
	last int64 // the relay's count at the last sample
}

// add adds to c what the relay counted since the last sample, n being its
// count now. A relay made anew (the CLI's, after its publisher's
// connection closed for good) counts from 0 again: then all of n is new.
func (d *dupSeen) add(c *atomic.Int64, n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n >= d.last {
		c.Add(n - d.last)
	} else {
		c.Add(n)
	}
	d.last = n
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

type consumerObserver struct {
	m *Metrics
}

// handlerSeries are one handler's series, resolved once.
type handlerSeries struct {
	received             prometheus.Counter
	handled              [txbox.HandleReleased + 1]prometheus.Counter
	duration, deliveries prometheus.Observer
	inFlight             prometheus.Gauge
}

func (m *Metrics) handler(name string) *handlerSeries {
	if h, ok := m.handlers.Load(name); ok {
		return h.(*handlerSeries)
	}
	h := &handlerSeries{
		received: m.received.WithLabelValues(name), duration: m.handlerDuration.WithLabelValues(name),
		deliveries: m.deliveries.WithLabelValues(name), inFlight: m.inFlight.WithLabelValues(name),
	}
	for r := txbox.HandleFresh; r <= txbox.HandleReleased; r++ {
		h.handled[r] = m.handled.WithLabelValues(name, r.String())
	}
	actual, _ := m.handlers.LoadOrStore(name, h)
	return actual.(*handlerSeries)
}

func (o consumerObserver) Received(handler string, deliveries int) {
	h := o.m.handler(handler)
	h.received.Inc()
	h.deliveries.Observe(float64(max(deliveries, 1)))
	h.inFlight.Inc()
}

func (o consumerObserver) Handled(handler string, result txbox.HandleResult, d time.Duration) {
	h := o.m.handler(handler)
	h.inFlight.Dec()
	if result >= txbox.HandleFresh && result <= txbox.HandleReleased {
		h.handled[result].Inc()
	}
	h.duration.Observe(d.Seconds())
}

// Unrouted counts a delivery no route claimed.
func (o consumerObserver) Unrouted(binding string, deadLettered bool) {
	action := "acked"
	if deadLettered {
		action = "dead_lettered"
	}
	o.m.unrouted.WithLabelValues(binding, action).Inc()
}

// InboxHook returns an inbox.Hook that counts sweeps (txbox_inbox_sweeps_total,
// txbox_inbox_swept_total) and passes every event on to next (nil: none).
// Set it in inbox.Config.Hook (consumer.Config.Inbox.Hook); to keep the
// default audit log, pass inbox.LogHook(logger) as next.
func (m *Metrics) InboxHook(next inbox.Hook) inbox.Hook {
	return func(ctx context.Context, e inbox.Event) {
		if e.Kind == inbox.EventSwept {
			result := "ok"
			if e.Err != nil {
				result = "error"
			}
			m.sweeps.WithLabelValues(e.Table, result).Inc()
			m.swept.WithLabelValues(e.Table).Add(float64(e.Deleted))
		}
		if next != nil {
			next(ctx, e)
		}
	}
}

// InboxStatser is what WatchInbox reads: *inbox.Inbox has it.
type InboxStatser interface {
	Stats(ctx context.Context) ([]inbox.SourceStats, error)
}

// WatchInbox samples ib's receipts by source and state every interval
// (default 30s) into txbox_inbox_receipts, until ctx ends: one query per
// interval (Stats scans the whole table, so keep the interval long on a
// large inbox). It returns at once; the sampling runs in the background.
func (m *Metrics) WatchInbox(ctx context.Context, ib InboxStatser, interval time.Duration) {
	if interval <= 0 {
		interval = 30 * time.Second
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			m.SampleInbox(ctx, ib)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// SampleInbox reads ib's receipts once into txbox_inbox_receipts.
func (m *Metrics) SampleInbox(ctx context.Context, ib InboxStatser) {
	stats, err := ib.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.inboxSampleErrors.Inc()
		}
		return
	}
	m.receipts.Reset() // a source whose receipts were all swept has none
	for _, s := range stats {
		m.receipts.WithLabelValues(s.Source, "processed").Set(float64(s.Processed))
		m.receipts.WithLabelValues(s.Source, "pending").Set(float64(s.Pending))
	}
}
