package relay

import (
	"context"
	"time"
)

// withClaimChecks adds the claim check tables' problems (missing, not
// migrated) to the outbox table's start-up check.
func (r *Relay) withClaimChecks(check func(ctx context.Context, retry bool) ([]string, error)) func(ctx context.Context, retry bool) ([]string, error) {
	if len(r.cfg.ClaimChecks) == 0 {
		return check
	}
	return func(ctx context.Context, retry bool) ([]string, error) {
		problems, err := check(ctx, retry)
		if err != nil || len(problems) > 0 {
			return problems, err
		}
		for _, s := range r.cfg.ClaimChecks {
			problems = append(problems, s.Check(ctx)...)
		}
		return problems, ctx.Err()
	}
}

// SweepClaimChecks sweeps the stores of Config.ClaimChecks
// (claimcheck.Store.Sweep with each store's retention) and returns how
// many payloads it deleted. A running relay calls it at each cleanup.
func (r *Relay) SweepClaimChecks(ctx context.Context) (int64, error) {
	var total int64
	for _, s := range r.cfg.ClaimChecks {
		n, err := s.Sweep(ctx, 0)
		total += n
		r.ccSwept.Add(n)
		if err != nil {
			return total, err
		}
	}
	r.ccSweeps.Add(1)
	return total, nil
}

// claimCheckLoop sweeps the claim check tables at each cleanup interval,
// beside the rounds (a sweep reads the outbox's undelivered rows once and
// deletes in statements of claimcheck.DefaultSweepBatch rows).
func (r *Relay) claimCheckLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.test.CleanupInterval)
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
