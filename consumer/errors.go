package consumer

import (
	"errors"
	"fmt"

	"github.com/txbox/txbox"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidConfig is txbox.ErrInvalidConfig: New's errors.
	ErrInvalidConfig = txbox.ErrInvalidConfig
	// ErrStartup is txbox.ErrStartup, matched by *StartupError.
	ErrStartup = txbox.ErrStartup
	// ErrPermanent is matched by errors made with Permanent.
	ErrPermanent = errors.New("txbox/consumer: permanent failure")
	// ErrStarted: a handler was registered, or Start called, on a consumer
	// already started.
	ErrStarted = errors.New("txbox/consumer: already started")
	// ErrHandlerTimeout: a handler ran past its Timeout
	// (Config.HandlerTimeout); it is its context's cause, and the
	// delivery's error wraps it.
	ErrHandlerTimeout = errors.New("txbox/consumer: the handler ran past its timeout")
)

// StartupError is txbox.StartupError, which Start returns listing every
// problem it found: handlers, broker bindings and the database disagree.
type StartupError = txbox.StartupError

// PermanentError marks a handler's failure that no retry can fix (a
// malformed payload, a reference to something that will never exist): the
// message is dead-lettered at once instead of being retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Is makes errors.Is match ErrPermanent.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Permanent wraps err so that the consumer dead-letters the message at once.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err was made with Permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// PanicError is a handler's panic, recovered; it counts as a failed
// delivery.
type PanicError struct{ Value any }

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }
