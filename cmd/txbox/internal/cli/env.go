package cli

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
	EnvTable           = "OUTBOX_TABLE"
	EnvSchema          = "OUTBOX_SCHEMA"
)
