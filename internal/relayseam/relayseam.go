// Package relayseam lets the packages of this module read what package
// relay keeps out of its API: the sample a relay hands its Observer, which
// package txboxui shows as a relay's backlog, and the counters that
// txbox bench polls without reading the table it measures
// (relay.Relay.Stats reads it). Package relay sets the functions as it is
// initialised.
package relayseam

import "context"

// Sample returns r's sample (r is a *relay.Relay), a txbox.RelaySample
// (as any: internal packages sit below the root package): its table's
// backlog, one query, and its state; a table that cannot be read is in
// the sample's Err.
var Sample func(ctx context.Context, r any) any

// Counters are the counters of relay.Stats that package relay's callers
// in this module poll without a read of the table.
type Counters struct {
	Published, Rejected, Dead, Rounds, FailedRounds int64
}

// CountersOf returns r's counters (r is a *relay.Relay), as Relay.Stats
// has them, without touching the database: for txbox bench, whose polls
// must not load the table it measures, and for the CLI's stats line.
var CountersOf func(r any) Counters
