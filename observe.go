package txbox

import (
	"context"
	"time"
)

// RelayObserver receives what a relay does, as it does it: the seam through
// which metrics adapters (package txboxprom, or one of your own) see the
// relay without the core importing a metrics SDK. Set it in
// relay.Config.Observer; a relay without one makes none of these calls.
//
// The relay calls it from its loops, synchronously: every method must be
// quick, must not block and must not panic; calls may be concurrent. The
// per-message call (Settled) passes only a string and scalars, so that an
// implementation can count without allocating.
//
// Embed BaseRelayObserver in an implementation: methods added to this
// interface later then have a no-op default and the implementation keeps
// compiling.
type RelayObserver interface {
	// Claimed: a claim took d and returned n rows (n may be 0).
	Claimed(n int, d time.Duration)
	// Published: one Publish call of n messages took d (from the first
	// send to the last ack or the timeout); failed of them were not
	// acknowledged (rejected or transient).
	Published(n, failed int, d time.Duration)
	// Settled: one claimed message's outcome, recorded in the table.
	// sinceCreated is the time from the row's created_at (its commit) to
	// now, when the broker's ack has been recorded: the commit-to-ack
	// latency for SettledPublished.
	Settled(topic string, outcome Outcome, sinceCreated time.Duration)
	// RoundFailed: a round failed at stage ("claim", "publish", "finish").
	RoundFailed(stage string)
	// Sampled: the periodic sample of the relay's table and state
	// (every 10 seconds).
	Sampled(s RelaySample)
}

// Outcome is what became of one claimed outbox message in a round.
type Outcome uint8

// The outcomes of Settled.
const (
	// OutcomePublished: the broker acknowledged it (a broker-side duplicate
	// included) and the row is marked.
	OutcomePublished Outcome = iota + 1
	// OutcomeRejected: the broker refused it; it is retried later.
	OutcomeRejected
	// OutcomeDead: refused for the last time, or invalid: parked as dead.
	OutcomeDead
	// OutcomeInvalid: the row broke the outbox contract and is dead at
	// once (it is not also reported as OutcomeDead).
	OutcomeInvalid
	// OutcomeUnacked: no answer from the broker (an outage or timeout):
	// the row goes back untouched, no attempt counted.
	OutcomeUnacked
)

func (o Outcome) String() string {
	switch o {
	case OutcomePublished:
		return "published"
	case OutcomeRejected:
		return "rejected"
	case OutcomeDead:
		return "dead"
	case OutcomeInvalid:
		return "invalid"
	case OutcomeUnacked:
		return "unacked"
	}
	return "unknown"
}

// RelaySample is one periodic reading of a relay and its outbox table: the
// table figures come from one query per relay per sample interval, never
// one per scrape.
type RelaySample struct {
	// At is when the sample was taken.
	At time.Time
	// Err is why the table could not be read (the figures below from the
	// table are then those of the last good sample), or nil.
	Err error

	// Backlog by state; the four are disjoint, and their sum is every row
	// not yet delivered plus the dead ones.
	Pending  int64 // undelivered, never rejected, not parked
	Retrying int64 // undelivered, rejected at least once, not dead, not parked
	Parked   int64 // undelivered, waiting behind a dead row of their key
	Dead     int64 // dead rows
	// OldestClaimableAge is the age (from created_at) of the oldest row a
	// claim could take now: undelivered, due (not waiting out a retry
	// delay) and not parked; zero when there is none.
	OldestClaimableAge time.Duration

	// OldestInFlightAge is how long ago the oldest batch this relay is
	// publishing was claimed (a publish stuck on the broker shows here);
	// zero when none is in flight. A batch leaves it before its marks
	// commit.
	OldestInFlightAge time.Duration
	// Listening: the relay receives LISTEN/NOTIFY wake-ups (else it polls).
	Listening bool
	// BrokerConnected is the publisher's connection state
	// (ConnectionChecker); true when the publisher does not report one.
	BrokerConnected bool
	// BrokerDuplicates counts the acks of the relay's publishes that said
	// the broker already held the message (DuplicateCounter), since the
	// relay was made; 0 when its publisher does not count them.
	BrokerDuplicates int64

	// Upkeep says the two figures below were read: on PostgreSQL, where
	// each sample reads them too (one more statement), unless they
	// could not be read. A replication slot may hold the horizon back
	// too: txbox stats names it.
	Upkeep bool
	// OldestTransactionAge is how long the oldest transaction of the database
	// (a session's or a prepared one, the relay's own sampling session
	// excepted) has been open, zero when none: VACUUM removes no row
	// version newer than its snapshot, so while it stays open every
	// delivered row's index entry stays in the way of the claims
	// (docs/guide/operations.md). DeadRows is the table's dead row versions,
	// PostgreSQL's estimate.
	OldestTransactionAge time.Duration
	DeadRows             int64
}

// BaseRelayObserver implements RelayObserver with no-ops; embed it.
type BaseRelayObserver struct{}

func (BaseRelayObserver) Claimed(int, time.Duration)             {}
func (BaseRelayObserver) Published(int, int, time.Duration)      {}
func (BaseRelayObserver) Settled(string, Outcome, time.Duration) {}
func (BaseRelayObserver) RoundFailed(string)                     {}
func (BaseRelayObserver) Sampled(RelaySample)                    {}

// ConsumerObserver receives what a consumer does with each delivery. Set it
// in consumer.Config.Observer; a consumer without one makes none of these
// calls. As with RelayObserver, methods must be quick and safe for
// concurrent use; embed BaseConsumerObserver.
type ConsumerObserver interface {
	// Received: handler's subscription handed over one delivery, the
	// deliveries-th of its message (1 for the first); it is in flight
	// until Handled reports it.
	Received(handler string, deliveries int)
	// Handled: the delivery's outcome, d after Received: the handler, the
	// inbox transaction and the settlement with the broker.
	Handled(handler string, result HandleResult, d time.Duration)
}

// HandleResult is what a consumer did with one delivery.
type HandleResult uint8

// The results of Handled.
const (
	// HandleFresh: the handler ran and succeeded; the message is acked.
	HandleFresh HandleResult = iota + 1
	// HandleDuplicate: the inbox already held the message; acked without
	// running the handler.
	HandleDuplicate
	// HandleFailed: the handler or the database failed; the message is
	// released for redelivery.
	HandleFailed
	// HandleDeadLettered: the message was dead-lettered.
	HandleDeadLettered
	// HandleReleased: released unprocessed at Stop.
	HandleReleased
)

func (r HandleResult) String() string {
	switch r {
	case HandleFresh:
		return "fresh"
	case HandleDuplicate:
		return "duplicate"
	case HandleFailed:
		return "failed"
	case HandleDeadLettered:
		return "dead_lettered"
	case HandleReleased:
		return "released"
	}
	return "unknown"
}

// BaseConsumerObserver implements ConsumerObserver with no-ops; embed it.
type BaseConsumerObserver struct{}

func (BaseConsumerObserver) Received(string, int)                        {}
func (BaseConsumerObserver) Handled(string, HandleResult, time.Duration) {}

// RelayTracer traces a relay's publishes: the seam through which a tracing
// adapter (package txboxotel, or one of your own) sees them without the
// core importing a tracing SDK. Set it in relay.Config.Tracer, or let the
// relay's Observer implement it; a relay with neither makes no tracer
// calls.
type RelayTracer interface {
	// StartPublish is called before each Publish call of msgs, one batch,
	// with the context the publish runs in; the publisher gets the context
	// it returns. The relay calls end once the broker has answered, with
	// Publish's result (nil: every message acknowledged; else aligned with
	// msgs). StartPublish must not keep or change msgs.
	StartPublish(ctx context.Context, msgs []Message) (_ context.Context, end func(errs []error))
}

// ConsumerTracer traces a consumer's deliveries. Set it in
// consumer.Config.Tracer, or let the consumer's Observer implement it.
type ConsumerTracer interface {
	// StartProcess is called when handler takes a delivery of msg, before
	// the inbox transaction; the handler runs in the context it returns.
	// The consumer calls end once the delivery is settled with the broker,
	// with its result and the handler's (or the database's) error, nil on
	// success.
	StartProcess(ctx context.Context, handler string, msg Received) (_ context.Context, end func(result HandleResult, err error))
}

// SlotObserver is implemented by a RelayObserver that also takes the
// log-based relay's periodic reading of its replication slot
// (txboxpgx/cdc, every 10 s); the relay checks for it with a
// type assertion. Same rules as RelayObserver: quick, non-blocking.
type SlotObserver interface {
	SlotSampled(s SlotSample)
}

// SlotSample is one reading of a log-based relay's replication slot.
type SlotSample struct {
	// At is when the sample was taken.
	At time.Time
	// Err is why the slot could not be read (the figures below are then
	// zero), or nil.
	Err error
	// Slot is the slot's name.
	Slot string
	// LagBytes is how far the slot's confirmed LSN is behind the server's
	// current WAL position: the WAL the slot holds that the relay has not
	// confirmed.
	LagBytes int64
	// LagSeconds is how long the oldest event the relay holds unsettled
	// has been waiting since its commit (its created_at); zero when it
	// holds none. Events the relay has not read yet show in LagBytes.
	LagSeconds float64
	// WALStatus is the slot's wal_status: reserved, extended, unreserved
	// or lost.
	WALStatus string
	// SafeWALSize is how many bytes of WAL may still be written before the
	// slot is in danger of losing WAL (max_slot_wal_keep_size), or -1 when
	// unbounded.
	SafeWALSize int64
}
