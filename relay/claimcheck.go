package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/txbox/txbox/claimcheck"
	"github.com/txbox/txbox/txboxdriver"
)

// claimChecks builds the stores of c.ClaimCheckTables, each swept against
// the relay's own outbox table.
func claimChecks[TTx any](drv txboxdriver.Driver[TTx], c Config) ([]*claimcheck.Store, error) {
	var out []*claimcheck.Store
	for _, table := range c.ClaimCheckTables {
		s, err := claimcheck.New(drv, claimcheck.Config{Schema: c.Schema, Table: table, OutboxTables: []string{c.Table}})
		if err != nil {
			return nil, fmt.Errorf("relay: claim check table %q: %w", table, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// withClaimChecks adds the claim check tables' problems (missing, not
// migrated) to the outbox table's start-up check.
func (r *Relay) withClaimChecks(check func(ctx context.Context, retry bool) ([]string, error)) func(ctx context.Context, retry bool) ([]string, error) {
	if len(r.claimChecks) == 0 {
		return check
	}
	return func(ctx context.Context, retry bool) ([]string, error) {
		problems, err := check(ctx, retry)
		if err != nil || len(problems) > 0 {
			return problems, err
		}
		for i, s := range r.claimChecks {
			for _, p := range s.Check(ctx) {
				problems = append(problems, fmt.Sprintf("claim check table %s: %s", r.cfg.ClaimCheckTables[i], p))
			}
		}
		return problems, ctx.Err()
	}
}

// SweepClaimChecks deletes the payloads of Config.ClaimCheckTables that
// both sides are done with (claimcheck.Store.Sweep against the relay's
// outbox table, with Config.ClaimCheckRetention) and returns how many it
// deleted. A running relay calls it every CleanupInterval.
func (r *Relay) SweepClaimChecks(ctx context.Context) (int64, error) {
	var total int64
	for i, s := range r.claimChecks {
		n, err := s.Sweep(ctx, r.cfg.ClaimCheckRetention)
		total += n
		r.ccSwept.Add(n)
		if err != nil {
			return total, fmt.Errorf("claim check table %s: %w", r.cfg.ClaimCheckTables[i], err)
		}
	}
	r.ccSweeps.Add(1)
	return total, nil
}

// claimCheckLoop sweeps the claim check tables every CleanupInterval,
// beside the rounds (a sweep reads the outbox's undelivered rows once and
// deletes in statements of claimcheck.DefaultSweepBatch rows).
func (r *Relay) claimCheckLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.CleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		n, err := r.SweepClaimChecks(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Warn("txbox relay: claim check sweep failed", "err", err, "deleted", n)
		case err == nil && n > 0:
			r.log.Info("txbox relay: claim check sweep", "deleted", n, "for", time.Since(start).Round(time.Millisecond))
		}
	}
}
