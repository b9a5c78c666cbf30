package inbox

import (
	"errors"
	"fmt"

	"github.com/txbox/txbox"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidConfig is matched by New's errors: a missing or invalid
	// table name, a schema on a dialect without schemas, a negative limit.
	// It is txbox.ErrInvalidConfig.
	ErrInvalidConfig = txbox.ErrInvalidConfig
	// ErrInvalidInput is matched by every *InputError.
	ErrInvalidInput = errors.New("txbox/inbox: invalid input")
	// ErrNotReceived: MarkProcessed found no receipt for the message.
	ErrNotReceived = errors.New("txbox/inbox: message not received")
)

// Reason says what is wrong with an input.
type Reason string

// The reasons of an InputError.
const (
	ReasonEmpty       Reason = "is empty"
	ReasonTooLong     Reason = "is too long"
	ReasonControlChar Reason = "contains a control character"
	ReasonBadUTF8     Reason = "is not valid UTF-8"
	ReasonNotJSON     Reason = "is not JSON-serialisable"
)

// InputError rejects a source, message id or metadata before anything is
// written: the call that returned it changed nothing in the database.
type InputError struct {
	Field  string // "source", "message id" or "metadata"
	Reason Reason
	Detail string // specifics: the length and the cap, the offending byte
	Err    error  // the JSON encoder's error, or nil
}

func (e *InputError) Error() string {
	s := fmt.Sprintf("txbox/inbox: %s %s", e.Field, e.Reason)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is match ErrInvalidInput.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// Unwrap returns the JSON encoder's error, if any.
func (e *InputError) Unwrap() error { return e.Err }

// HandlerError is how Handle returns the error of the caller's handler, after
// rolling back the transaction (the receipt included, so a redelivery runs
// the handler again). errors.As tells a handler's failure from the inbox's
// own; errors.Is and errors.As see through it to the handler's error.
type HandlerError struct {
	Source    string
	MessageID string
	Err       error
	// Rollback is the error of the transaction's rollback after the
	// handler failed (Handle), if it failed: the transaction's connection
	// broke. Nil in a batch, where a failed rollback to the item's
	// savepoint fails the whole batch (*BatchError).
	Rollback error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("txbox/inbox: handler of %s message %q: %v", e.Source, e.MessageID, e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }
