package cli

import (
	"strings"
	"testing"
	"time"
)

func TestTaskRetentionFromEnv(t *testing.T) {
	t.Setenv(EnvTaskRetention, "90m")
	if d, err := taskRetentionFromEnv(); err != nil || d != 90*time.Minute {
		t.Fatalf("%s=90m: %s, %v", EnvTaskRetention, d, err)
	}
	for _, bad := range []string{"soon", "-1h", "0s"} {
		t.Setenv(EnvTaskRetention, bad)
		if _, err := taskRetentionFromEnv(); err == nil || !strings.Contains(err.Error(), EnvTaskRetention) {
			t.Errorf("%s=%q: error %v does not name the variable", EnvTaskRetention, bad, err)
		}
	}
}
