package drivertest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
)

// Options adapts the suite to a driver. The zero value suits a database
// that accepts concurrent writers.
type Options struct {
	// Relays is how many relays the concurrency test runs side by side on
	// one table. Default: 4.
	Relays int
	// Copies is how many concurrent copies of one message the inbox
	// concurrency test handles. Default: 16.
	Copies int
}

// Option changes Options.
type Option func(*Options)

// WithOptions replaces the suite's options.
func WithOptions(o Options) Option { return func(p *Options) { *p = o } }

// Exercise runs the conformance suite against the driver newDriver returns,
// as parallel subtests of t. See the package documentation for what
// newDriver must provide.
func Exercise[TTx any](t *testing.T, newDriver func(t *testing.T) txboxdriver.Driver[TTx], opts ...Option) {
	t.Helper()
	o := Options{}
	for _, f := range opts {
		f(&o)
	}
	if o.Relays <= 0 {
		o.Relays = 4
	}
	if o.Copies <= 0 {
		o.Copies = 16
	}
	s := &suite[TTx]{newDriver: newDriver, opts: o}
	for _, c := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Migrate", s.testMigrate},
		{"OutboxAddClaimMark", s.testAddClaimMark},
		{"OutboxRollbackNotDelivered", s.testRollback},
		{"OutboxRejectDeadRedriveDiscard", s.testDead},
		{"OutboxDeadBrief", s.testDeadBrief},
		{"OutboxInspect", s.testInspect},
		{"OutboxCleanup", s.testCleanup},
		{"OutboxCleanupBesideAnother", s.testCleanupBeside},
		{"OutboxKeyOrder", s.testKeyOrder},
		{"RelaysConcurrent", s.testRelaysConcurrent},
		{"Pipelines", s.testPipelines},
		{"InboxHandle", s.testInboxHandle},
		{"InboxLowLevel", s.testInboxLowLevel},
		{"InboxSweepStats", s.testInboxSweepStats},
		{"InboxSweepBesideAnother", s.testSweepBeside},
		{"InboxConcurrentCopies", s.testInboxConcurrent},
		{"ClaimCheck", s.testClaimCheck},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
}

type suite[TTx any] struct {
	newDriver func(t *testing.T) txboxdriver.Driver[TTx]
	opts      Options
}

const inboxTable = "txbox_inbox"

// setup returns a driver on a migrated database (outbox and inbox).
func (s *suite[TTx]) setup(t *testing.T) txboxdriver.Driver[TTx] {
	t.Helper()
	drv := s.newDriver(t)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{InboxTables: []string{inboxTable}})
	must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	must(t, err, "migrate up")
	return drv
}

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func outbox[TTx any](t *testing.T, drv txboxdriver.Driver[TTx]) *txbox.Outbox[TTx] {
	ob, err := txbox.New(drv, txbox.Config{})
	must(t, err, "txbox.New")
	return ob
}

// add writes msgs in one transaction of the caller's type, committed when
// commit is true.
func add[TTx any](t *testing.T, drv txboxdriver.Driver[TTx], ob *txbox.Outbox[TTx], commit bool, msgs ...txbox.Message) []string {
	t.Helper()
	ctx := context.Background()
	tx, dtx, err := drv.BeginTx(ctx)
	must(t, err, "begin")
	ids, err := ob.Add(ctx, tx, msgs...)
	if err != nil {
		_ = dtx.Rollback(ctx)
		t.Fatalf("add: %v", err)
	}
	if commit {
		must(t, dtx.Commit(ctx), "commit")
	} else {
		must(t, dtx.Rollback(ctx), "rollback")
	}
	return ids
}

func newRelay[TTx any](t *testing.T, drv txboxdriver.Driver[TTx], pub txbox.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.DisableNotify = true
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(t)
	}
	r, err := relay.New(drv, pub, cfg)
	must(t, err, "relay.New")
	return r
}

// drain runs rounds until two in a row, the second at least the relay's
// PollInterval after the first, claim nothing: a claim that follows a full
// one may read only part of the table, and a key found parked is left out
// of the claims for PollInterval (a redrive frees it after that); the claim
// after an empty one reads the whole table, and the one after the wait
// reads parked keys again.
func drain(t *testing.T, r *relay.Relay) {
	t.Helper()
	empty := 0
	for empty < 2 {
		n, err := r.Round(context.Background())
		must(t, err, "round")
		if n > 0 {
			empty = 0
			continue
		}
		empty++
		if empty == 1 {
			time.Sleep(r.Config().PollInterval)
		}
	}
}

func quietLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// pastRetention waits until rows stamped now are past a retention of a
// microsecond.
func pastRetention() {
	start := time.Now()
	for time.Since(start) < time.Millisecond {
		time.Sleep(time.Millisecond)
	}
}
