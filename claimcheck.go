package txbox

import (
	"context"
	"errors"

	"github.com/txbox/txbox/txboxdriver"
)

// HeaderClaimCheck carries a claim check reference: the message's payload
// was stored in a ClaimCheck store under this reference (Config.ClaimCheck)
// and the message travels with an empty payload. It is the one Txbox-*
// header a row may hold (IsReservedHeader reports false for it): a
// plain-SQL writer may store a payload and set it too. A consumer with
// consumer.Config.ClaimCheck fetches the payload before its handler runs;
// a foreign consumer reads it as docs/reference/wire-format.md says.
const HeaderClaimCheck = "Txbox-Claim-Check"

// DefaultClaimCheckThreshold is Config.ClaimCheckThreshold's default: a
// payload over 256 KiB goes to the ClaimCheck store.
const DefaultClaimCheckThreshold = 256 << 10

// ErrClaimNotFound is returned (wrapped) by ClaimCheck.Get when the store
// holds nothing under the reference: never stored, rolled back, or
// deleted by retention. The consumer dead-letters such a message at once.
var ErrClaimNotFound = errors.New("txbox: claim check reference not found")

// ClaimCheck stores payloads too large to travel through the broker (NATS
// caps a message at 1 MiB by default; RabbitMQ and Kafka at what they are
// configured for). Outbox.Add puts a payload over Config.ClaimCheckThreshold
// into it and writes the message with the reference in HeaderClaimCheck;
// the consumer (consumer.Config.ClaimCheck) gets it back before the handler
// runs. References are opaque texts of at most 256 bytes of printable
// ASCII, made by Add (a UUIDv7).
//
// Package claimcheck implements it with a table in the outbox's database,
// where Put writes in the caller's transaction, so that the payload
// commits with the message or not at all. A store elsewhere (S3, GCS, a
// blob store) implements it by ignoring ex: Put uploads the object under
// ref before the transaction commits (an object whose transaction rolls
// back is an orphan for its bucket's lifecycle rule to delete), Get
// downloads it and wraps ErrClaimNotFound for a missing key, Delete
// removes objects; its retention is the bucket's lifecycle rule or Delete.
type ClaimCheck interface {
	// Put stores payload under ref. ex runs SQL in the transaction the
	// message is added in (the pool's for AddNoTx); a store outside the
	// database ignores it.
	Put(ctx context.Context, ex txboxdriver.Executor, ref string, payload []byte) error
	// Get returns the payload stored under ref, or an error wrapping
	// ErrClaimNotFound.
	Get(ctx context.Context, ref string) ([]byte, error)
	// Delete removes the payloads stored under refs; a missing one is not
	// an error.
	Delete(ctx context.Context, refs ...string) error
}
