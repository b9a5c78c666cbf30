package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

func TestConfigDefaults(t *testing.T) {
	if _, err := (&Config{BatchSize: -1}).withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("negative batch size accepted: %v", err)
	}
	if _, err := (&Config{ClaimCheckRetention: -time.Second}).withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("negative claim check retention accepted: %v", err)
	}
	d, err := (&Config{}).withDefaults()
	must(t, err, "defaults")
	if d.PollInterval != time.Second || d.BatchSize != 100 || d.Retention != 168*time.Hour || d.CleanupInterval != time.Hour || d.MaxAttempts != 10 ||
		d.ClaimCheckRetention != 168*time.Hour || d.ClaimCheckTables != nil {
		t.Errorf("defaults = %+v", d)
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
