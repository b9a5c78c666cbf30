package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Stats is the relay's state: its counters since New, whether it runs and
// can deliver, and the table's backlog. Relay.Stats reads it.
type Stats struct {
	// At is when the stats were read.
	At time.Time

	Published    int64 // messages acknowledged by the broker and marked
	Rejected     int64 // broker rejections (each costs an attempt)
	Dead         int64 // messages this relay parked as dead (Invalid included)
	Invalid      int64 // rows that broke the outbox contract, parked dead at once
	Rounds       int64
	FailedRounds int64
	// Probes counts the rounds of at most one row that a relay backing
	// off after a failed round runs, every 500 ms, to resume as soon as
	// the failure is over; they are not in Rounds or FailedRounds.
	Probes int64
	// ListenFailures counts the times the LISTEN/NOTIFY connection was lost
	// or its start-up check failed (the relay polls meanwhile).
	ListenFailures int64
	// Duplicates counts the acks in which the broker said it already held
	// the message and dropped the copy (the relay's crash-after-publish
	// copies, caught by the broker's dedupe), from publishers that report
	// it (txbox.DuplicateCounter, e.g. natsjs). Only this relay's
	// messages count, also when it shares its publisher (a Group). Such
	// messages are in Published too.
	Duplicates int64
	// ClaimCheckSweeps counts the sweeps of Config.ClaimChecks that
	// went through, ClaimCheckSwept the payloads they deleted.
	ClaimCheckSweeps, ClaimCheckSwept int64
	// LaneConflicts counts the claims that found a keyed row of a lane this
	// relay owns locked by another transaction: a transaction holding
	// outbox rows, or two relays owning one lane (a fencing failure, a bug
	// to report). Each such claim left the row's key out from that row on
	// (docs/design/relay.md); the relay logs them at most once a minute.
	LaneConflicts int64

	// Running: the relay runs (Start, or in a running Group).
	Running bool
	// BrokerConnected is the publisher's connection state
	// (txbox.ConnectionChecker); true when the publisher does not report
	// one.
	BrokerConnected bool
	// LastGoodRound is when a round last succeeded; zero before the first.
	LastGoodRound time.Time
	// Stale is how old LastGoodRound may be in a ready relay:
	// PollInterval + 2 × the claim lease (31s with the defaults).
	Stale time.Duration
	// Listening: LISTEN/NOTIFY wake-ups are active; Notify says the relay
	// tries to have them (PostgreSQL through txboxpgx, not disabled). A
	// relay that does not listen polls; that does not make it unready.
	Listening, Notify bool
	// Lanes are the lanes this relay claims keyed rows from now, in
	// order; nil on SQLite and while it owns none.
	Lanes []int

	// DatabaseErr is why the table could not be read (Relay.Stats returns
	// it too), or nil; the table's figures below are then zero.
	DatabaseErr error
	// The table's figures, read in one statement by every Stats call.
	Pending          int64         // rows still to deliver (table-wide), parked ones included
	DeadRows         int64         // dead rows (table-wide)
	Parked           int64         // pending rows waiting behind a dead row of their key
	OldestPendingAge time.Duration // age of the oldest row still to deliver
}

// Stats reads the relay's state: its own counters and state, which never
// fail, and the table's backlog, one statement bounded by ctx. When the
// table cannot be read, Stats returns the error and the relay's own
// figures all the same (see Stats.DatabaseErr). It works on a relay that
// does not run, too.
func (r *Relay) Stats(ctx context.Context) (Stats, error) {
	s := Stats{
		At:        time.Now(),
		Published: r.published.Load(), Rejected: r.rejected.Load(), Dead: r.dead.Load(), Invalid: r.invalid.Load(),
		Rounds: r.rounds.Load(), FailedRounds: r.failedRounds.Load(), Probes: r.probes.Load(), ListenFailures: r.listenFails.Load(),
		Duplicates: r.duplicates(), LaneConflicts: r.laneConflicts(), ClaimCheckSweeps: r.ccSweeps.Load(), ClaimCheckSwept: r.ccSwept.Load(),
		Running:         r.running.Load(),
		BrokerConnected: r.brokerConnected(),
		Stale:           r.cfg.PollInterval + 2*r.cfg.test.ClaimLease,
		Listening:       r.listening(),
		Notify:          r.listen != nil,
		Lanes:           r.ownedLanes(),
	}
	if ns := r.lastGood.Load(); ns != 0 {
		s.LastGoodRound = time.Unix(0, ns)
	}
	c, err := r.store.Counts(ctx)
	if err != nil {
		s.DatabaseErr = err
		return s, err
	}
	s.Pending, s.DeadRows, s.Parked, s.OldestPendingAge = c.Pending, c.Dead, c.Parked, c.OldestPendingAge
	return s, nil
}

// Ready returns nil when the relay, as s shows it, can deliver: it runs,
// its table could be read, its broker connection is up and a round
// succeeded within Stale of At; else an error naming every reason. A relay
// whose broker connection was closed for good (the zombie of a closed NATS
// connection) is not ready.
func (s Stats) Ready() error {
	var why []string
	if !s.Running {
		why = append(why, "the relay is not running")
	}
	if s.DatabaseErr != nil {
		why = append(why, "database unreachable: "+s.DatabaseErr.Error())
	}
	if !s.BrokerConnected {
		why = append(why, "broker not connected")
	}
	switch {
	case s.LastGoodRound.IsZero():
		why = append(why, "no round has succeeded yet")
	case s.At.Sub(s.LastGoodRound) > s.Stale:
		why = append(why, fmt.Sprintf("last good round %s ago (over %s)", s.At.Sub(s.LastGoodRound).Round(time.Millisecond), s.Stale))
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New("txbox relay not ready: " + strings.Join(why, "; "))
}
