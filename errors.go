package txbox

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidMessage is matched by every *InvalidMessageError.
	ErrInvalidMessage = errors.New("txbox: invalid message")
	// ErrPayloadTooLarge: the payload and headers are over
	// Config.MaxMessageBytes, or over a broker's limit.
	ErrPayloadTooLarge = errors.New("txbox: payload too large")
	// ErrReservedHeader: a header tried to set a name reserved for the
	// message's identity (Nats-Msg-Id, Message-Id, Txbox-*).
	ErrReservedHeader = errors.New("txbox: reserved header")
	// ErrInvalidConfig is matched by configuration errors.
	ErrInvalidConfig = errors.New("txbox: invalid config")
	// ErrRejected is matched by errors a publisher returns for a message the
	// broker refused; see Reject.
	ErrRejected = errors.New("txbox: rejected by broker")
	// ErrStartup is matched by every *StartupError.
	ErrStartup = errors.New("txbox: startup validation failed")
	// ErrPublisherClosed is wrapped by the errors of a publisher that can
	// never publish again: its connection was closed for good (by its
	// owner, by the server, after its last reconnect attempt, on an
	// authentication error). It is not a message's fault and costs no
	// attempt; the relay stops and returns it from Run (see relay.Relay.Err
	// for Start), so that whoever runs it builds a new connection or exits
	// for a supervisor to restart it.
	ErrPublisherClosed = errors.New("txbox: publisher closed")
	// ErrMessageNotFound: Outbox.Cancel found no row with the message id
	// (never written, rolled back, discarded, or delivered and deleted
	// since: by retention, or at once with relay --retention 0).
	ErrMessageNotFound = errors.New("txbox: no outbox message with this id")
	// ErrDelivered: Outbox.Cancel came too late, the message was published.
	ErrDelivered = errors.New("txbox: message already delivered")
	// ErrMessageDead: Outbox.Cancel found the message dead (it is not
	// tried again); discard it with package dead or `txbox dead discard`.
	ErrMessageDead = errors.New("txbox: message is dead")
	// ErrInFlight: Outbox.Cancel found the message held by a relay that is
	// publishing it (SQLite; on PostgreSQL and MySQL a cancel waits for the
	// relay instead). It is delivered unless the broker rejects it.
	ErrInFlight = errors.New("txbox: message is being delivered")
)

// StartupError lists every problem that a relay's or a consumer's Start
// found (tables not migrated, broker bindings missing, handlers that
// disagree with them). Nothing was started.
type StartupError struct {
	Component string // "relay", "consumer"
	Problems  []string
}

func (e *StartupError) Error() string {
	return fmt.Sprintf("txbox: %s cannot start, %d problem(s):\n  - %s", e.Component, len(e.Problems), strings.Join(e.Problems, "\n  - "))
}

// Is makes errors.Is match ErrStartup.
func (e *StartupError) Is(target error) bool { return target == ErrStartup }

// InvalidMessageError says which field of which message is wrong.
// Nothing of the call that returned it was written.
type InvalidMessageError struct {
	Index  int    // position in the Add call
	ID     string // the message's id, if it had one
	Field  string // "topic", "payload", "headers", …
	Reason string
	Err    error // a more specific sentinel, or nil
}

func (e *InvalidMessageError) Error() string {
	id := ""
	if e.ID != "" {
		id = fmt.Sprintf(" (id %q)", e.ID)
	}
	return fmt.Sprintf("txbox: message %d%s: %s %s", e.Index, id, e.Field, e.Reason)
}

// Is makes errors.Is match ErrInvalidMessage and the specific sentinel.
func (e *InvalidMessageError) Is(target error) bool {
	return target == ErrInvalidMessage || (e.Err != nil && target == e.Err)
}

// RejectedError marks a publish failure that is specific to one message (the
// broker refused it: too large, no route, forbidden subject). The relay
// counts it as an attempt and, after the attempt budget, parks the message as
// dead. Every other publish error (timeouts, a broker outage, a closed
// connection) is transient: it costs the message no attempt.
type RejectedError struct{ Err error }

func (e *RejectedError) Error() string { return "rejected by broker: " + e.Err.Error() }
func (e *RejectedError) Unwrap() error { return e.Err }

// Is makes errors.Is match ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Reject wraps err as a message-specific failure; see RejectedError.
func Reject(err error) error {
	if err == nil {
		return nil
	}
	return &RejectedError{Err: err}
}

// IsRejected reports whether err is a message-specific publish failure.
func IsRejected(err error) bool { return errors.Is(err, ErrRejected) }
