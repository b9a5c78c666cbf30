// Package roundtimes carries the times of a relay's rounds and wake-ups to
// a recorder, for `txbox bench latency`, which breaks the commit-to-broker
// latency down by stage (docs/benchmarks/2026-12-07-relay-latency.md). A
// relay records only when its Tracer (relay.Config.Tracer, or its
// Observer as a tracer) is also a Recorder; no other relay makes a call.
package roundtimes

import "time"

// Round is one round of a relay that claimed rows.
type Round struct {
	Start    time.Time // the round began: it called its claim
	Sent     time.Time // the relay's claim before it had picked: its statements went out (zero: not known)
	Answered time.Time // the database answered the claim, before the pick (zero: not known)
	Claimed  time.Time // the claim returned
	Publish  time.Time // the messages were handed to the publisher
	Acked    time.Time // the publisher returned: the broker answered
	Finished time.Time // the marks committed (or the batch was released)
	IDs      []string  // the message ids handed to the publisher
	Beside   int       // the relay's other rounds in flight when it began
}

// Recorder receives the times. Calls may be concurrent; each must be quick.
type Recorder interface {
	// RelayRound: a round that claimed rows ended.
	RelayRound(Round)
	// RelayWake: a notification or a Wake came at at; busy says that a
	// round of the relay was in flight or queued, which the wake-up then
	// merged into.
	RelayWake(at time.Time, busy bool)
}

// Batch is one publish of the log-based relay (txboxpgx/cdc): per
// message, when its transaction committed (the server's commit time),
// when the walsender sent the transaction's commit (the send time of its
// message in the stream, the server's clock) and when the relay had read
// it; then when the batch went to the publisher and when the publisher
// returned.
type Batch struct {
	Commit   []time.Time // per message: its transaction's commit time
	Sent     []time.Time // per message: the walsender sent its transaction's commit
	Received []time.Time // per message: the relay had read its transaction's commit
	Publish  time.Time   // the messages were handed to the publisher
	Acked    time.Time   // the publisher returned: the broker answered
	IDs      []string    // the message ids handed to the publisher
	Beside   int         // the relay's other publishes in flight when it began
}

// BatchRecorder receives the batches of a log-based relay whose Observer
// is one. Calls may be concurrent; each must be quick.
type BatchRecorder interface {
	RelayBatch(Batch)
}
