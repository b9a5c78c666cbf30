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
	DefaultPollInterval    = time.Second
	DefaultBatchSize       = 100
	DefaultRetention       = 168 * time.Hour
	DefaultCleanupInterval = time.Hour
	DefaultMaxAttempts     = 10
	DefaultPublishTimeout  = 10 * time.Second
	// DefaultClaimLease is the claim lease with the default
	// PublishTimeout: PublishTimeout + ClaimLeaseMargin.
	DefaultClaimLease = DefaultPublishTimeout + ClaimLeaseMargin
	// ClaimLeaseMargin is what a ClaimLease left zero adds to
	// PublishTimeout: the time a round spends outside the publish (claim,
	// prepare, marks).
	ClaimLeaseMargin = 5 * time.Second
)

// Config configures a Relay. Zero fields take their defaults; negative
// values are an error from New.
type Config struct {
	// Schema and Table name the outbox table, as in txbox.Config.
	Schema string
	Table  string

	// PollInterval is how long an idle relay waits before polling again
	// after a batch that was not full. A relay woken by LISTEN/NOTIFY
	// reaches it after looks that double from a few milliseconds (see
	// docs/reference/guarantees.md, Wake-up latency). Default: 1s. Env
	// OUTBOX_POLL_INTERVAL.
	PollInterval time.Duration
	// BatchSize is the most rows one round claims and publishes. A full
	// batch polls again at once. Default: 100. Env OUTBOX_BATCH_SIZE.
	BatchSize int
	// Retention is how long published rows are kept before cleanup deletes
	// them. Default: 168h. Env OUTBOX_RETENTION.
	Retention time.Duration
	// DeletePublished deletes each row in the transaction that records its
	// delivery, instead of keeping it for Retention. The relay then writes
	// less (no new row version, no index entries) and drains faster, but
	// delivered messages can no longer be looked at or replayed from the
	// table. Dead rows are kept either way. Env OUTBOX_RETENTION=0.
	DeletePublished bool
	// CleanupInterval is how often cleanup runs. Default: 1h.
	// Env OUTBOX_CLEANUP_INTERVAL.
	CleanupInterval time.Duration
	// ClaimCheckTables are claim check tables (package claimcheck, in
	// Schema) whose payloads the relay deletes once both sides are done
	// with them: every CleanupInterval, beside its rounds, it runs
	// claimcheck.Store.Sweep against its own outbox table with
	// ClaimCheckRetention (a payload is kept while a row of the table
	// that refers to it is still to deliver or dead, and for
	// ClaimCheckRetention after). A claim check table that messages of
	// other outbox tables refer to too must be swept against all of them
	// (claimcheck.Config.OutboxTables), not here. See
	// docs/guide/claim-check.md. Default: none.
	ClaimCheckTables []string
	// ClaimCheckRetention is how long a payload of ClaimCheckTables is
	// kept once its message was delivered: longer than a consumer may
	// take to handle it. Default: claimcheck.DefaultRetention (168h).
	ClaimCheckRetention time.Duration
	// MaxAttempts is how many times the broker may reject a message before
	// it is parked as dead. Outages and timeouts do not count.
	// Default: 10. Env OUTBOX_MAX_ATTEMPTS.
	MaxAttempts int
	// PublishTimeout bounds the wait for the broker's acks of one batch.
	// Default: 10s. Env OUTBOX_PUBLISH_TIMEOUT.
	PublishTimeout time.Duration
	// ClaimLease bounds how long a claim holds its rows when the relay
	// that took them is gone: on SQLite it is the lease, after which
	// another relay claims the rows of a relay that was killed; on
	// PostgreSQL it is the claim transaction's
	// idle_in_transaction_session_timeout, after which the server ends the
	// transaction of a relay whose connection vanished without the server
	// noticing. MySQL has no equivalent and ignores it (see
	// docs/reference/guarantees.md). It must exceed PublishTimeout: a claim that
	// expires while its relay still publishes lets another relay publish
	// the same rows, a duplicate (never a loss). Default: PublishTimeout +
	// ClaimLeaseMargin (15s); at most 2h (a longer SQLite lease would count
	// as expired). Env OUTBOX_CLAIM_LEASE.
	ClaimLease time.Duration

	// LaneLease is how long a lane lease lasts unless renewed (every
	// LaneLease/20): a relay that died loses its lanes, and with them the
	// delivery of their keyed rows, to the others after it. Default: 10s.
	LaneLease time.Duration

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
	relaytest.Register(func(cfg any, tc relaytest.Config) any {
		c := cfg.(Config)
		c.test = tc
		return c
	})
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.PollInterval < 0 || out.BatchSize < 0 || out.Retention < 0 || out.CleanupInterval < 0 || out.ClaimCheckRetention < 0 ||
		out.MaxAttempts < 0 || out.PublishTimeout < 0 || out.LaneLease < 0 || out.ClaimLease < 0 || out.test.Negative() {
		return out, fmt.Errorf("%w: relay config has a negative value: %+v", txbox.ErrInvalidConfig, *c)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&out.PollInterval, DefaultPollInterval)
	def(&out.Retention, DefaultRetention)
	def(&out.CleanupInterval, DefaultCleanupInterval)
	def(&out.ClaimCheckRetention, claimcheck.DefaultRetention)
	def(&out.PublishTimeout, DefaultPublishTimeout)
	def(&out.ClaimLease, out.PublishTimeout+ClaimLeaseMargin)
	def(&out.LaneLease, DefaultLaneLease)
	if out.BatchSize == 0 {
		out.BatchSize = DefaultBatchSize
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	out.test = out.test.WithDefaults()
	if out.BatchSize > 10000 {
		return out, fmt.Errorf("%w: batch size %d is over 10000", txbox.ErrInvalidConfig, out.BatchSize)
	}
	if out.ClaimLease <= out.PublishTimeout {
		return out, fmt.Errorf("%w: claim lease %s must exceed publish timeout %s", txbox.ErrInvalidConfig, out.ClaimLease, out.PublishTimeout)
	}
	if out.ClaimLease > outboxsql.MaxClaimLease {
		return out, fmt.Errorf("%w: claim lease %s is over the limit of %s", txbox.ErrInvalidConfig, out.ClaimLease, outboxsql.MaxClaimLease)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}
