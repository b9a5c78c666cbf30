package relay

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/relaytest"
)

// Defaults of Config, as in the reference outbox relay.
const (
	DefaultPollInterval   = time.Second
	DefaultBatchSize      = 100
	DefaultRetention      = 168 * time.Hour
	DefaultMaxAttempts    = 10
	DefaultPublishTimeout = 10 * time.Second
	// ClaimLeaseMargin is what a relay's claim lease adds to
	// PublishTimeout: the time a round spends outside the publish (claim,
	// prepare, marks).
	ClaimLeaseMargin = 5 * time.Second
	// DeletePublished, as Config.Retention, deletes each row in the
	// transaction that records its delivery.
	DeletePublished time.Duration = -1
)

// Config configures a Relay. Zero fields take their defaults; negative
// values are an error from New (but Retention DeletePublished).
//
// Derived from them: the claim lease, PublishTimeout + ClaimLeaseMargin,
// bounds how long a claim holds its rows when the relay that took them is
// gone (on SQLite the lease after which another relay claims the rows of a
// relay that was killed; on PostgreSQL the claim transaction's
// idle_in_transaction_session_timeout; MySQL has none, see
// docs/reference/guarantees.md). Cleanup runs every hour, or every
// Retention when that is shorter.
type Config struct {
	// Schema and Table name the outbox table, as in txbox.Config.
	Schema string
	Table  string

	// PollInterval is how long an idle relay waits before polling again
	// after a batch that was not full. A relay woken by LISTEN/NOTIFY
	// reaches it after looks that double from a few milliseconds (see
	// docs/reference/guarantees.md, Wake-up latency). Default: 1s.
	PollInterval time.Duration
	// BatchSize is the most rows one round claims and publishes, at most
	// 10000. A full batch polls again at once. Default: 100.
	BatchSize int
	// Retention is how long published rows are kept before cleanup deletes
	// them. DeletePublished deletes each row in the transaction that
	// records its delivery instead: the relay then writes less (no new row
	// version, no index entries) and drains faster, but delivered messages
	// can no longer be looked at or replayed from the table. Dead rows are
	// kept either way. Default: 168h.
	Retention time.Duration
	// MaxAttempts is how many times the broker may reject a message before
	// it is parked as dead. Outages and timeouts do not count.
	// Default: 10.
	MaxAttempts int
	// PublishTimeout bounds the wait for the broker's acks of one batch; the
	// claim lease is PublishTimeout + ClaimLeaseMargin, at most 2h (a
	// longer SQLite lease would count as expired). Default: 10s.
	PublishTimeout time.Duration

	// ClaimChecks are claim check stores (package claimcheck) the relay
	// sweeps at each cleanup, each against its own
	// claimcheck.Config.OutboxTables with its own Retention; their tables'
	// problems join the relay's start-up check. See
	// docs/guide/claim-check.md. Default: none.
	ClaimChecks []*claimcheck.Store

	// DisableNotify turns off the LISTEN/NOTIFY wake-up on PostgreSQL
	// through txboxpgx (the only driver that has it): the relay then
	// only polls. Default: false.
	DisableNotify bool

	// Logger receives the relay's logs. Default: slog.Default().
	Logger *slog.Logger

	// Observer receives the relay's rounds, messages and periodic samples
	// (see txbox.RelayObserver; package txboxprom has a Prometheus one).
	// Default: nil, and then the relay makes no observer calls and takes
	// no samples.
	Observer txbox.RelayObserver
	// Tracer traces each batch's publish (see txbox.RelayTracer; package
	// txboxotel has an OpenTelemetry one). Default: nil, and then the
	// Observer, if it implements txbox.RelayTracer; else no tracer calls.
	Tracer txbox.RelayTracer

	// test holds the settings only tests change (relaytest.With).
	test relaytest.Config
}

func init() {
	relaytest.Register(func(c Config, tc relaytest.Config) Config {
		c.test = tc
		return c
	})
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.PollInterval < 0 || out.BatchSize < 0 || (out.Retention < 0 && out.Retention != DeletePublished) ||
		out.MaxAttempts < 0 || out.PublishTimeout < 0 || out.test.Negative() {
		return out, fmt.Errorf("%w: relay config has a negative value: %+v", txbox.ErrInvalidConfig, *c)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&out.PollInterval, DefaultPollInterval)
	def(&out.Retention, DefaultRetention)
	def(&out.PublishTimeout, DefaultPublishTimeout)
	if out.BatchSize == 0 {
		out.BatchSize = DefaultBatchSize
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	cleanup := defaultCleanupInterval
	if out.Retention > 0 {
		cleanup = max(min(cleanup, out.Retention), time.Second)
	}
	def(&out.test.CleanupInterval, cleanup)
	def(&out.test.ClaimLease, out.PublishTimeout+ClaimLeaseMargin)
	out.test = out.test.WithDefaults()
	if out.BatchSize > 10000 {
		return out, fmt.Errorf("%w: batch size %d is over 10000", txbox.ErrInvalidConfig, out.BatchSize)
	}
	if out.test.ClaimLease <= out.PublishTimeout {
		return out, fmt.Errorf("%w: claim lease %s must exceed publish timeout %s", txbox.ErrInvalidConfig, out.test.ClaimLease, out.PublishTimeout)
	}
	if out.test.ClaimLease > outboxsql.MaxClaimLease {
		return out, fmt.Errorf("%w: publish timeout %s: the claim lease %s is over the limit of %s", txbox.ErrInvalidConfig, out.PublishTimeout, out.test.ClaimLease, outboxsql.MaxClaimLease)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// defaultCleanupInterval is how often cleanup runs when Retention is longer.
const defaultCleanupInterval = time.Hour
