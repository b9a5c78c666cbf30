package cli

import (
	"fmt"
	"os"
	"time"
)

// The relay's environment variables (OUTBOX_*, as in the reference relay).
// A flag given on the command line wins over its variable.
const (
	EnvPollInterval    = "OUTBOX_POLL_INTERVAL"
	EnvBatchSize       = "OUTBOX_BATCH_SIZE"
	EnvRetention       = "OUTBOX_RETENTION"
	EnvCleanupInterval = "OUTBOX_CLEANUP_INTERVAL"
	EnvMaxAttempts     = "OUTBOX_MAX_ATTEMPTS"
	EnvPublishTimeout  = "OUTBOX_PUBLISH_TIMEOUT"
	EnvClaimLease      = "OUTBOX_CLAIM_LEASE"
	EnvLanes           = "OUTBOX_LANES"
	EnvLaneLease       = "OUTBOX_LANE_LEASE"
	EnvTable           = "OUTBOX_TABLE"
	EnvSchema          = "OUTBOX_SCHEMA"
	// EnvTaskRetention is asynq's retention of completed tasks (the window
	// in which a re-enqueue of the same task id is dropped).
	EnvTaskRetention = "OUTBOX_TASK_RETENTION"
)

// taskRetentionFromEnv returns OUTBOX_TASK_RETENTION, or 0 when unset.
func taskRetentionFromEnv() (time.Duration, error) {
	v := os.Getenv(EnvTaskRetention)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 24h", EnvTaskRetention, v)
	}
	return d, nil
}
