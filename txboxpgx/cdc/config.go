package cdc

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/txboxdriver"
)

// Defaults of Config.
const (
	DefaultBatchSize       = 500
	DefaultMaxPending      = 100000
	DefaultPublishTimeout  = 10 * time.Second
	DefaultMaxAttempts     = 10
	DefaultRetryDelay      = time.Second
	DefaultBackoffMax      = 30 * time.Second
	DefaultStatusInterval  = time.Second
	DefaultLeaseTimeout    = 10 * time.Second
	DefaultRetention       = 168 * time.Hour
	DefaultCleanupBatch    = 1000
	DefaultRedriveInterval = 5 * time.Second
)

// defaultCleanupInterval is how often cleanup runs when Retention is
// longer: an hour, or every Retention (at least a second) when shorter.
const defaultCleanupInterval = time.Hour

// Config configures a Relay and names its slot and publication. Zero
// fields take their defaults; negative values are an error from New.
type Config struct {
	// Schema and Table name the outbox table, as in txbox.Config.
	// Default: the connection's search path, txbox_outbox.
	Schema string
	Table  string
	// Slot is the logical replication slot, one per outbox table.
	// Default: the table's name in lower case with the suffix _cdc
	// (txbox_outbox_cdc).
	Slot string
	// Publication publishes the table's inserts. Default: the slot's name.
	Publication string
	// MessagePrefix, when set, reads message mode: the logical decoding
	// messages with this prefix that txbox.Outbox.Add writes with the same
	// txbox.Config.MessagePrefix, instead of the table's inserts (which it
	// then passes over). The table still holds the dead letters: a message
	// recorded dead is inserted into it with dead_at set (txbox dead lists,
	// redrives and discards it). Default: "", table mode.
	MessagePrefix string

	// BatchSize is the most messages one Publish call carries. Default: 500.
	BatchSize int
	// MaxPending is the most rows the relay holds unsettled in memory
	// while a parked key waits for its retry (the watermark cannot pass
	// it); at that bound it stops reading the stream, and every key waits,
	// until the oldest rows settle. Default: 100000.
	MaxPending int
	// PublishTimeout bounds the wait for the broker's acks of one batch.
	// Default: 10s.
	PublishTimeout time.Duration
	// MaxAttempts is how many times the broker may reject a message
	// before it is recorded as dead in the table (dead_at, last_error) and
	// passed over. Outages and timeouts do not count. Default: 10.
	MaxAttempts int
	// RetryDelay is the wait before a rejected message is tried again; it
	// doubles with each attempt, up to BackoffMax. Default: 1s.
	RetryDelay time.Duration
	// BackoffMax caps the doubling wait after failed publishes and lost
	// connections. Default: 30s.
	BackoffMax time.Duration
	// StatusInterval is how often the relay tells the server the LSN it
	// confirms (with the server's keepalives in between). Default: 1s.
	StatusInterval time.Duration
	// LeaseTimeout is how long a reader that stopped answering keeps its
	// lease: the lease's session ends after LeaseTimeout without a
	// heartbeat (idle_session_timeout, PostgreSQL 14 and later), and a
	// standby takes over. A reader that exits or is killed loses it at
	// once. Default: 10s.
	LeaseTimeout time.Duration
	// Retention is how long delivered rows are kept before cleanup deletes
	// them; zero takes the default, negative is an error. Cleanup runs
	// every hour, or every Retention when that is shorter. Default: 168h.
	Retention time.Duration
	// RedriveInterval is how often the reading relay looks for dead rows
	// that `txbox dead redrive` made pending again, and publishes them
	// (Relay.Redriven). Default: 5s.
	RedriveInterval time.Duration

	// Logger receives the relay's logs. Default: slog.Default().
	Logger *slog.Logger
	// Observer receives the relay's publishes and settled messages
	// (txbox.RelayObserver: Published and Settled), and, when it is also a
	// txbox.SlotObserver (txboxprom's is), a reading of the slot's lag and
	// WAL figures every 10 s. Default: nil.
	Observer txbox.RelayObserver

	// test holds the settings only tests change (relaytest.With):
	// SampleInterval and CleanupInterval.
	test relaytest.Config
}

func init() {
	relaytest.Register(func(c Config, tc relaytest.Config) Config {
		c.test = tc
		return c
	})
}

// slotName is what PostgreSQL accepts as a replication slot's name.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// names are a Config's identifiers, validated and quoted.
type names struct {
	table       string // quoted, qualified
	schema      string // bare; "" = the search path
	bareTable   string
	slot        string // bare: a slot name is a literal, not an identifier
	publication string // bare
}

func (c *Config) names() (names, error) {
	var n names
	qt, err := txbox.Config{Schema: c.Schema, Table: c.Table}.TableName(txboxdriver.Postgres)
	if err != nil {
		return n, err
	}
	n.table, n.schema, n.bareTable = qt, c.Schema, c.Table
	if n.bareTable == "" {
		n.bareTable = txbox.DefaultTable
	}
	n.slot = c.Slot
	if n.slot == "" {
		n.slot = strings.ToLower(sqlname.Derived(n.bareTable, "cdc"))
	}
	n.publication = c.Publication
	if n.publication == "" {
		n.publication = n.slot
	}
	if !slotName.MatchString(n.slot) {
		return n, fmt.Errorf("%w: slot name %q: PostgreSQL takes 1 to 63 lower-case letters, digits and underscores", txbox.ErrInvalidConfig, n.slot)
	}
	if err := sqlname.Validate("publication", n.publication); err != nil {
		return n, fmt.Errorf("%w: %w", txbox.ErrInvalidConfig, err)
	}
	return n, nil
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.BatchSize < 0 || out.MaxPending < 0 || out.PublishTimeout < 0 || out.MaxAttempts < 0 || out.RetryDelay < 0 || out.BackoffMax < 0 ||
		out.StatusInterval < 0 || out.LeaseTimeout < 0 || out.Retention < 0 || out.RedriveInterval < 0 || out.test.Negative() {
		return out, fmt.Errorf("%w: cdc config has a negative value: %+v", txbox.ErrInvalidConfig, *c)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&out.PublishTimeout, DefaultPublishTimeout)
	def(&out.RetryDelay, DefaultRetryDelay)
	def(&out.BackoffMax, DefaultBackoffMax)
	def(&out.StatusInterval, DefaultStatusInterval)
	def(&out.LeaseTimeout, DefaultLeaseTimeout)
	def(&out.Retention, DefaultRetention)
	def(&out.RedriveInterval, DefaultRedriveInterval)
	def(&out.test.CleanupInterval, max(min(defaultCleanupInterval, out.Retention), time.Second))
	out.test = out.test.WithDefaults()
	if out.BatchSize == 0 {
		out.BatchSize = DefaultBatchSize
	}
	if out.MaxPending == 0 {
		out.MaxPending = DefaultMaxPending
	}
	if out.MaxPending < out.BatchSize {
		out.MaxPending = out.BatchSize
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.LeaseTimeout < time.Second {
		return out, fmt.Errorf("%w: lease timeout %s is under 1s", txbox.ErrInvalidConfig, out.LeaseTimeout)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// SlotNames returns the slot and publication names of c, defaults
// applied, or why they are not valid.
func (c Config) SlotNames() (slot, publication string, err error) {
	n, err := c.names()
	return n.slot, n.publication, err
}
