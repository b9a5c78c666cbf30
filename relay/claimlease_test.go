package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
)

// The claim lease follows PublishTimeout; one that does not exceed it (a
// test's), or that is over the SQLite limit, is an error of New.
func TestClaimLeaseDerivedAndBound(t *testing.T) {
	for _, c := range []struct {
		publish, want time.Duration
	}{
		{0, 15 * time.Second},
		{2 * time.Second, 7 * time.Second},
		{time.Minute, time.Minute + ClaimLeaseMargin},
	} {
		d, err := (&Config{PublishTimeout: c.publish}).withDefaults()
		must(t, err, "defaults")
		if d.test.ClaimLease != c.want {
			t.Errorf("PublishTimeout %s: lease %s, want %s", c.publish, d.test.ClaimLease, c.want)
		}
	}
	for _, lease := range []time.Duration{5 * time.Second, 10 * time.Second} {
		cfg := relaytest.With(Config{}, relaytest.Config{ClaimLease: lease})
		if _, err := cfg.withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("claim lease %s with PublishTimeout 10s: %v, want ErrInvalidConfig", lease, err)
		}
	}
	if _, err := (&Config{PublishTimeout: 2 * time.Hour}).withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("PublishTimeout 2h (a lease over the limit): %v, want ErrInvalidConfig", err)
	}
}
