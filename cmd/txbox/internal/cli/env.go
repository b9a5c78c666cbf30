package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// The relay's environment variables. Each is also read under its
// deprecated name OUTBOX_* when the TXBOX_ one is not set, with a
// deprecation line (see lookupEnv). A flag given on the command line wins
// over its variable.
const (
	EnvPollInterval    = "TXBOX_POLL_INTERVAL"
	EnvBatchSize       = "TXBOX_BATCH_SIZE"
	EnvRetention       = "TXBOX_RETENTION"
	EnvCleanupInterval = "TXBOX_CLEANUP_INTERVAL"
	EnvMaxAttempts     = "TXBOX_MAX_ATTEMPTS"
	EnvPublishTimeout  = "TXBOX_PUBLISH_TIMEOUT"
	EnvClaimLease      = "TXBOX_CLAIM_LEASE"
	EnvLanes           = "TXBOX_LANES"
	EnvLaneLease       = "TXBOX_LANE_LEASE"
	EnvTable           = "TXBOX_TABLE"
	EnvSchema          = "TXBOX_SCHEMA"
	// EnvTaskRetention is asynq's retention of completed tasks (the window
	// in which a re-enqueue of the same task id is dropped).
	EnvTaskRetention = "TXBOX_TASK_RETENTION"
)

// legacyEnv are the variables that had the prefix OUTBOX_ instead of TXBOX_.
var legacyEnv = []string{EnvPollInterval, EnvBatchSize, EnvRetention, EnvCleanupInterval, EnvMaxAttempts, EnvPublishTimeout,
	EnvClaimLease, EnvLanes, EnvLaneLease, EnvTable, EnvSchema, EnvTaskRetention}

// legacyName is the old name of the variable name, or "".
func legacyName(name string) string {
	if slices.Contains(legacyEnv, name) {
		return "OUTBOX_" + strings.TrimPrefix(name, "TXBOX_")
	}
	return ""
}

// lookupEnv returns the value of the variable name when set and not
// empty, else of its old OUTBOX_ name; from is the name it was read from.
func lookupEnv(name string) (value, from string, ok bool) {
	if v, set := os.LookupEnv(name); set && v != "" {
		return v, name, true
	}
	if old := legacyName(name); old != "" {
		if v, set := os.LookupEnv(old); set && v != "" {
			return v, old, true
		}
	}
	return "", name, false
}

// deprecatedEnv returns a line for each old OUTBOX_ variable that is set
// while its TXBOX_ name is not.
func deprecatedEnv() []string {
	var out []string
	for _, name := range legacyEnv {
		if _, from, ok := lookupEnv(name); ok && from != name {
			out = append(out, fmt.Sprintf("txbox: warning: %s is deprecated, set %s instead (the old name is read until v1)", from, name))
		}
	}
	return out
}

// taskRetentionFromEnv returns TXBOX_TASK_RETENTION, or 0 when unset.
func taskRetentionFromEnv() (time.Duration, error) {
	v, from, ok := lookupEnv(EnvTaskRetention)
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 24h", from, v)
	}
	return d, nil
}
