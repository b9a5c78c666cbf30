package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox"
)

// probeEvery is how often a relay that backs off after a failed round
// probes whether the failure is over (Relay.probe): the backoff grows to
// BackoffMax, the probes do not, so the relay resumes within about
// probeEvery of the database answering or the broker accepting again.
const probeEvery = 500 * time.Millisecond

// outageReminder is how often a relay whose rounds keep failing says so
// again (see outage).
const outageReminder = time.Minute

// errPublish marks a round whose publish failed (the broker), as against
// its claim or its marks (the database).
var errPublish = errors.New("publish")

// Ways a relay's wait after a failed round ended (outage.ended's
// resumedBy).
const (
	resumedByBackoff   = "backoff"   // the backoff ran out
	resumedByProbe     = "probe"     // a probe went through
	resumedByReconnect = "reconnect" // the publisher connected again
	resumedByWake      = "wake"      // Wake, or a notification
)

// outage turns a run of failures of one repeated task of a relay (its
// rounds, in its own loops or its turns in a Group; its lane lease
// heartbeats) into few log lines: a warning at the first failure, a
// reminder at most every outageReminder while they keep failing, and one
// line when the task succeeds again, with how long the failures lasted and
// how many there were. Each other failure is logged at debug level.
type outage struct {
	texts  *outageTexts // nil: roundTexts
	active atomic.Bool  // since is set: the fast path of ended

	mu       sync.Mutex
	since    time.Time // the first failure of the run
	remindAt time.Time
	failures int64 // failures in the run
	probes   int64 // probes that failed in the run (rounds only)
}

// outageTexts are the words of an outage's lines.
type outageTexts struct {
	many, one string // the task, plural and singular
	count     string // the attribute that counts the failures
	note      string // what the relay does meanwhile, in the first line
}

var (
	roundTexts = outageTexts{many: "rounds", one: "round", count: "rounds_failed",
		note: "backing off, probing every " + probeEvery.String() + " until one succeeds"}
	beatTexts = outageTexts{many: "lane lease heartbeats", one: "lane lease heartbeat", count: "beats_failed",
		note: "other relays take the lanes whose lease runs out meanwhile"}
)

func (o *outage) words() *outageTexts {
	if o.texts == nil {
		return &roundTexts
	}
	return o.texts
}

// failed records a failure and logs it; retryIn is the backoff before the
// next full try (0: none to say).
func (o *outage) failed(log *slog.Logger, err error, retryIn time.Duration, brokerAway bool, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.words()
	o.failures++
	attrs := []any{"err", err}
	if retryIn > 0 {
		attrs = append(attrs, "retry_in", retryIn)
	}
	if brokerAway {
		attrs = append(attrs, "broker_connected", false)
	}
	switch {
	case o.since.IsZero():
		o.since, o.remindAt, o.probes = now, now.Add(outageReminder), 0
		o.active.Store(true)
		log.Warn("txbox relay: "+w.many+" are failing; "+w.note, attrs...)
	case !now.Before(o.remindAt):
		o.remindAt = now.Add(outageReminder)
		attrs = append(attrs, "for", now.Sub(o.since).Round(time.Millisecond), w.count, o.failures)
		if w == &roundTexts {
			attrs = append(attrs, "probes_failed", o.probes)
		}
		log.Warn("txbox relay: "+w.many+" are still failing", attrs...)
	default:
		log.Debug("txbox relay: "+w.one+" failed", attrs...)
	}
}

// probeFailed records a failed probe, logged at debug level.
func (o *outage) probeFailed(log *slog.Logger, err error) {
	o.mu.Lock()
	o.probes++
	o.mu.Unlock()
	log.Debug("txbox relay: probe failed", "err", err)
}

// ended records a success, and logs the end of the run of failures before
// it, if any; resumedBy says what ended the wait before it ("": nothing to
// say).
func (o *outage) ended(log *slog.Logger, resumedBy string, now time.Time) {
	if !o.active.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return
	}
	w := o.words()
	attrs := []any{"after", now.Sub(o.since).Round(time.Millisecond), w.count, o.failures}
	if w == &roundTexts {
		attrs = append(attrs, "probes_failed", o.probes)
	}
	if resumedBy != "" {
		attrs = append(attrs, "resumed_by", resumedBy)
	}
	log.Info("txbox relay: "+w.many+" succeed again", attrs...)
	o.since, o.failures, o.probes = time.Time{}, 0, 0
	o.active.Store(false)
}

// brokerFailed reports whether a failed round's error came from its publish
// rather than from the database.
func brokerFailed(err error) bool { return errors.Is(err, errPublish) }

// errNotConnected is a probe's error while the publisher says it is not
// connected; errNoAnswer one's that claimed no row to try the broker with.
var (
	errNotConnected = errors.New("probe: the publisher is not connected")
	errNoAnswer     = errors.New("probe: no row to publish, the broker's state unknown")
)

// probe runs a round of at most one row, while the relay backs off after
// a round that failed with failed, and returns nil when that failure is
// over: after a database failure, the claim (and marks) went through;
// after a publish failure, the broker answered the probe's message
// (acknowledged or rejected it). A probe that claimed nothing after a
// publish failure tells nothing (errNoAnswer), and one while the publisher
// says it is not connected (txbox.ConnectionChecker) claims nothing
// (errNotConnected). A probe is not a round in Stats (Probes counts it)
// nor for the Observer's RoundFailed; its messages are observed as any
// others.
func (r *Relay) probe(ctx context.Context, failed error) error {
	if c, ok := r.pub.(txbox.ConnectionChecker); ok && !c.Connected() {
		return errNotConnected
	}
	r.probes.Add(1)
	answered := r.published.Load() + r.rejected.Load()
	_, err := r.round(ctx, true)
	if err == nil && brokerFailed(failed) && r.published.Load()+r.rejected.Load() == answered {
		err = errNoAnswer
	}
	if err != nil && ctx.Err() == nil {
		r.outage.probeFailed(r.log, err)
	}
	return err
}
