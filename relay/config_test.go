package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{EnvPollInterval: "250ms", EnvBatchSize: "500", EnvRetention: "24h", EnvCleanupInterval: "5m", EnvMaxAttempts: "3"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := configFrom(Config{}, lookup)
	must(t, err, "configFrom")
	if c.PollInterval != 250*time.Millisecond || c.BatchSize != 500 || c.Retention != 24*time.Hour || c.CleanupInterval != 5*time.Minute || c.MaxAttempts != 3 {
		t.Fatalf("config from env = %+v", c)
	}
	if c.DeletePublished {
		t.Errorf("%s=24h set DeletePublished", EnvRetention)
	}
	c, err = configFrom(Config{}, func(k string) (string, bool) { return map[string]string{EnvRetention: "0"}[k], k == EnvRetention })
	must(t, err, "configFrom "+EnvRetention+"=0")
	if !c.DeletePublished || c.Retention != 0 {
		t.Errorf("%s=0: DeletePublished %v, Retention %s; want true, unset", EnvRetention, c.DeletePublished, c.Retention)
	}
	for k, bad := range map[string]string{EnvPollInterval: "abc", EnvBatchSize: "-1", EnvRetention: "-1h", EnvMaxAttempts: "ten"} {
		env := map[string]string{k: bad}
		_, err := configFrom(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if !errors.Is(err, txbox.ErrInvalidConfig) || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%q: error %v does not name the variable", k, bad, err)
		}
	}
	if _, err := (&Config{BatchSize: -1}).withDefaults(); !errors.Is(err, txbox.ErrInvalidConfig) {
		t.Errorf("negative batch size accepted: %v", err)
	}
	d, err := (&Config{}).withDefaults()
	must(t, err, "defaults")
	if d.PollInterval != time.Second || d.BatchSize != 100 || d.Retention != 168*time.Hour || d.CleanupInterval != time.Hour || d.MaxAttempts != 10 {
		t.Errorf("defaults = %+v", d)
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
