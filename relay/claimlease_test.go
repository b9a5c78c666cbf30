package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

// A zero ClaimLease follows PublishTimeout; one that does not exceed it is
// an error.
func TestClaimLeaseDefaultsAndBound(t *testing.T) {
	for _, c := range []struct {
		publish, lease, want time.Duration
	}{
		{0, 0, 15 * time.Second},
		{2 * time.Second, 0, 7 * time.Second},
		{time.Minute, 0, time.Minute + ClaimLeaseMargin},
		{0, 11 * time.Second, 11 * time.Second},
	} {
		d, err := (&Config{PublishTimeout: c.publish, ClaimLease: c.lease}).withDefaults()
		must(t, err, "defaults")
		if d.ClaimLease != c.want {
			t.Errorf("PublishTimeout %s, ClaimLease %s: lease %s, want %s", c.publish, c.lease, d.ClaimLease, c.want)
		}
	}
	if DefaultClaimLease != 15*time.Second {
		t.Errorf("DefaultClaimLease = %s, want 15s", DefaultClaimLease)
	}
	for _, lease := range []time.Duration{5 * time.Second, 10 * time.Second} {
		if _, err := (&Config{ClaimLease: lease}).withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("ClaimLease %s with PublishTimeout 10s: %v, want ErrInvalidConfig", lease, err)
		}
	}
}
