package relay

import (
	"fmt"
	"log/slog"

	"github.com/txbox/txbox"
)

// DefaultDatabaseBudget is how many rounds of a Group may hold a connection
// of one database at once, unless GroupConfig.DatabaseBudget says otherwise.
const DefaultDatabaseBudget = 2

// GroupConfig configures a Group. Zero fields take their defaults.
type GroupConfig struct {
	// DatabaseBudget is how many rounds may run at once on the stores of
	// one database (Store.Database): each round holds one connection of
	// that database from its claim to its marks, so with it the group
	// never holds more than DatabaseBudget connections of a database for
	// relaying (cleanups run inside a store's turn and count too; a
	// store's samples and its lane heartbeat run beside its turns and do
	// not). Size the database's pool above it. Default: 2.
	DatabaseBudget int
	// DisableNotify turns off the group's LISTEN/NOTIFY wake-up: by
	// default the group opens one listening connection per PostgreSQL
	// database (stores grouped as for DatabaseBudget, through a driver
	// that is a txboxdriver.ChannelListener, such as txboxpgx) and queues a
	// store as soon as its table's notify trigger rings; without it idle
	// stores poll every PollInterval or wait for Wake. A store whose relay
	// has Config.DisableNotify only polls either way. Default: false.
	DisableNotify bool
	// Logger receives the group's logs; each store's lines carry
	// store=<name>. Default: slog.Default().
	Logger *slog.Logger
	// OnEvent, when set, receives the group's scheduling events in the
	// order they happen: it is called with the group's lock held, so it
	// must be quick and must not call the Group. Default: nil.
	OnEvent func(GroupEvent)
}

func (c GroupConfig) withDefaults() (GroupConfig, error) {
	if c.DatabaseBudget < 0 {
		return c, fmt.Errorf("%w: group database budget %d is negative", txbox.ErrInvalidConfig, c.DatabaseBudget)
	}
	if c.DatabaseBudget == 0 {
		c.DatabaseBudget = DefaultDatabaseBudget
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// GroupEventKind says what a GroupEvent reports.
type GroupEventKind uint8

// The kinds of GroupEvent.
const (
	// EventQueued: the store has (or may have) work and waits for a turn.
	EventQueued GroupEventKind = iota + 1
	// EventStarted: the store's round started; it holds one unit of its
	// database's budget until EventFinished.
	EventStarted
	// EventFinished: the store's round ended; Rows and Err are its result.
	EventFinished
	// EventRemoved: the store left the group (Remove), its last round done.
	EventRemoved
)

func (k GroupEventKind) String() string {
	switch k {
	case EventQueued:
		return "queued"
	case EventStarted:
		return "started"
	case EventFinished:
		return "finished"
	case EventRemoved:
		return "removed"
	}
	return "unknown"
}

// GroupEvent is one scheduling step of a Group (GroupConfig.OnEvent).
type GroupEvent struct {
	Kind     GroupEventKind
	Store    string // the store's name
	Database string // the store's database, as Store.Database names it
	// Busy is how many rounds of the store's database run once this event
	// has happened.
	Busy int
	Rows int   // EventFinished: rows the round claimed
	Err  error // EventFinished: the round's error, if any
}
