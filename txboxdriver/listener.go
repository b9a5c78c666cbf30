package txboxdriver

import "context"

// Listener is an optional capability of a Driver: it opens a connection of
// its own that receives notifications (PostgreSQL's LISTEN/NOTIFY) on one
// channel. txboxpgx implements it. The relay wakes through ChannelListener
// (one connection per database); with a driver that is only a Listener it
// polls.
type Listener interface {
	// Listen opens a connection that listens on channel. The caller closes
	// the Notifications; that connection is never returned to the pool.
	Listen(ctx context.Context, channel string) (Notifications, error)
}

// Notifications is a connection listening on one channel.
type Notifications interface {
	// Wait blocks until a notification arrives or ctx ends, and returns
	// the notification's payload. Any error means the connection is no
	// longer listening: close it and listen again.
	Wait(ctx context.Context) (payload string, err error)
	// Close closes the connection.
	Close(ctx context.Context) error
}

// ChannelListener is an optional capability of a Driver, beside Listener:
// one connection that listens on many channels, added and removed while it
// runs. A relay (a relay.Group of one store) and a relay.Group use it to
// wake the outbox tables of one database with one connection, as soon as a
// writer commits; without it they poll. txboxpgx implements it.
type ChannelListener interface {
	// ListenChannels opens a connection that listens on no channel yet.
	// The caller closes it; it is never returned to the pool.
	ListenChannels(ctx context.Context) (Channels, error)
}

// Channels is a connection listening on a set of channels. Its methods are
// not safe for concurrent use: one goroutine owns it.
type Channels interface {
	// Listen adds channel to the set.
	Listen(ctx context.Context, channel string) error
	// Unlisten removes channel from the set.
	Unlisten(ctx context.Context, channel string) error
	// Wait blocks until a notification arrives or ctx ends, and returns
	// its channel and payload. When ctx ended the connection stays
	// usable (to change the set, then wait again); any other error means
	// it is no longer listening: close it and open another.
	Wait(ctx context.Context) (channel, payload string, err error)
	// Close closes the connection.
	Close(ctx context.Context) error
}
