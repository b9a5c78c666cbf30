// Package relaytest holds the relay settings that only tests and
// benchmarks change; a relay.Config (and a cdc.Config, of txboxpgx/cdc)
// carries them unexported, set with With. Zero fields take the defaults
// below.
package relaytest

import (
	"fmt"
	"reflect"
	"time"
)

// The defaults of Config.
const (
	DefaultNotifyProbeTimeout = 2 * time.Second
	DefaultSampleInterval     = 10 * time.Second
	DefaultCleanupBatchSize   = 1000
	DefaultBackoffMax         = 30 * time.Second
	DefaultRetryDelay         = time.Second
	DefaultConcurrency        = 1
	DefaultLaneLease          = 10 * time.Second
)

// Config holds a relay's test-only settings.
type Config struct {
	// NotifyProbeTimeout bounds the start-up check that notifications
	// arrive.
	NotifyProbeTimeout time.Duration
	// SampleInterval is how often a relay with an Observer reads its
	// table's backlog and hands the figures to Observer.Sampled.
	SampleInterval time.Duration
	// CleanupBatchSize bounds the rows one cleanup statement deletes.
	CleanupBatchSize int
	// BackoffMax caps the doubling wait between full rounds after failed
	// rounds; meanwhile the relay probes every 500 ms with a round of at
	// most one row and resumes when a probe goes through.
	BackoffMax time.Duration
	// RetryDelay is the wait before a rejected message is tried again; it
	// doubles with each attempt, up to 5 minutes.
	RetryDelay time.Duration
	// Concurrency is how many claim-publish-mark rounds the relay runs
	// side by side. With 1, the relay claims the next batch while it waits
	// for the acks of the last as long as batches come full.
	Concurrency int
	// ClaimLease replaces the relay's claim lease (PublishTimeout +
	// relay.ClaimLeaseMargin); it must exceed PublishTimeout.
	ClaimLease time.Duration
	// LaneLease is how long a lane lease lasts unless renewed (every
	// LaneLease/20): a relay that died loses its lanes, and with them the
	// delivery of their keyed rows, to the others after it.
	LaneLease time.Duration
	// CleanupInterval is how often cleanup runs (and the claim check
	// sweep). Default: an hour, or Retention when that is shorter.
	CleanupInterval time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.NotifyProbeTimeout, DefaultNotifyProbeTimeout)
	def(&c.SampleInterval, DefaultSampleInterval)
	def(&c.BackoffMax, DefaultBackoffMax)
	def(&c.RetryDelay, DefaultRetryDelay)
	def(&c.LaneLease, DefaultLaneLease)
	if c.CleanupBatchSize == 0 {
		c.CleanupBatchSize = DefaultCleanupBatchSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	return c
}

// Negative reports whether a field of c is negative.
func (c Config) Negative() bool {
	return c.NotifyProbeTimeout < 0 || c.SampleInterval < 0 || c.CleanupBatchSize < 0 || c.BackoffMax < 0 ||
		c.RetryDelay < 0 || c.Concurrency < 0 || c.ClaimLease < 0 || c.LaneLease < 0 || c.CleanupInterval < 0
}

var setters = map[reflect.Type]func(cfg any, tc Config) any{}

// Register is called by package relay and package cdc (txboxpgx/cdc) with
// the func that sets their C's test settings.
func Register[C any](f func(cfg C, tc Config) C) {
	setters[reflect.TypeFor[C]()] = func(cfg any, tc Config) any { return f(cfg.(C), tc) }
}

// With returns cfg, a relay.Config or a cdc.Config, with the test settings
// tc (a cdc.Config reads SampleInterval and CleanupInterval only).
func With[C any](cfg C, tc Config) C {
	f, ok := setters[reflect.TypeFor[C]()]
	if !ok {
		panic(fmt.Sprintf("relaytest: %s takes no test settings (its package is not imported?)", reflect.TypeFor[C]()))
	}
	return f(cfg, tc).(C)
}
