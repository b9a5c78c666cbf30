// Package backoff computes the doubling, capped delays with which the relay
// and the consumer retry.
package backoff

import "time"

// Next is the delay that follows prev: first when prev is zero, else twice
// prev, at most max.
func Next(prev, first, max time.Duration) time.Duration {
	if prev == 0 {
		return first
	}
	return min(2*prev, max)
}

// Nth is the delay after the n-th failure: base doubled n-1 times, at most
// max.
func Nth(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
