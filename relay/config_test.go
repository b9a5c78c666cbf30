package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

func TestConfigDefaults(t *testing.T) {
	for _, c := range []Config{{BatchSize: -1}, {Retention: -time.Second}, {PublishTimeout: -1}} {
		if _, err := c.withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("%+v accepted: %v", c, err)
		}
	}
	d, err := (&Config{}).withDefaults()
	must(t, err, "defaults")
	if d.PollInterval != time.Second || d.BatchSize != 100 || d.Retention != 168*time.Hour || d.test.CleanupInterval != time.Hour || d.MaxAttempts != 10 ||
		d.ClaimChecks != nil {
		t.Errorf("defaults = %+v", d)
	}
}

// Cleanup runs every hour, or every Retention when that is shorter (at
// most once a second); DeletePublished keeps the hour.
func TestCleanupIntervalFollowsRetention(t *testing.T) {
	for _, c := range []struct{ retention, want time.Duration }{
		{0, time.Hour},
		{10 * time.Minute, 10 * time.Minute},
		{time.Millisecond, time.Second},
		{DeletePublished, time.Hour},
	} {
		d, err := (&Config{Retention: c.retention}).withDefaults()
		must(t, err, "defaults")
		if d.test.CleanupInterval != c.want {
			t.Errorf("Retention %s: cleanup every %s, want %s", c.retention, d.test.CleanupInterval, c.want)
		}
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
