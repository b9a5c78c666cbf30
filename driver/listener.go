package driver

import "context"

// Listener is an optional capability of a Driver: it opens a connection of
// its own that receives notifications (PostgreSQL's LISTEN/NOTIFY). The
// relay uses it, when the driver has it, to wake as soon as a writer
// commits; without it the relay polls. txboxpgx implements it.
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
