package txboxtest

import (
	"context"
	"time"

	"github.com/txbox/txbox/relay"
)

// DrainOpts are the options of DrainRelay; nil means the defaults.
type DrainOpts struct {
	// InactivityTimeout is how long DrainRelay goes on without progress
	// (a round that claimed rows) before it fails: a round is bounded by
	// it, and failed rounds are retried until it passes. Default:
	// DefaultInactivityTimeout (10s).
	InactivityTimeout time.Duration
}

// DrainRelay runs r's rounds (relay.Relay.Round) one after the other until
// one finds nothing deliverable, and returns how many messages the broker
// acknowledged meanwhile. A round that fails (a transient publish error, a
// database error) is retried after a short wait; DrainRelay fails tb with
// the last error when no round made progress for the inactivity timeout.
//
// Use it on a relay that is not started: the test then decides when rows
// move. Rows that are not deliverable yet stay: those waiting for a retry
// after a rejection (a second after the first, doubling) and those behind a dead row
// of their key.
func DrainRelay(ctx context.Context, tb TB, r *relay.Relay, opts *DrainOpts) int {
	tb.Helper()
	var timeout time.Duration
	if opts != nil {
		timeout = opts.InactivityTimeout
	}
	timeout = inactivity(timeout)
	start := publishedBy(ctx, r)
	before := start
	progress := time.Now()
	wait := time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		n, err := r.Round(rctx)
		cancel()
		published := publishedBy(ctx, r)
		if err == nil && n == 0 {
			return int(published - start)
		}
		progressed := published > before
		before = published
		if (err == nil && n > 0) || progressed {
			progress, wait = time.Now(), time.Millisecond
			if err == nil {
				continue
			}
		}
		if ctx.Err() != nil {
			fail(tb, "DrainRelay: %v (last round: %v)", ctx.Err(), err)
			return int(published - start)
		}
		if time.Since(progress) >= timeout {
			fail(tb, "DrainRelay: no progress for %s; last round failed: %v", timeout, err)
			return int(published - start)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// publishedBy returns r's Published counter. Stats fills it even when the
// table cannot be read, so the read's error does not matter here.
func publishedBy(ctx context.Context, r *relay.Relay) int64 {
	s, _ := r.Stats(ctx)
	return s.Published
}
