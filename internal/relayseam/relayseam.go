// Package relayseam lets the packages of this module read what package
// relay keeps out of its API: the sample a relay hands its Observer, which
// package txboxui shows as a relay's backlog. Package relay sets the
// functions as it is initialised.
package relayseam

import (
	"context"

	"github.com/txbox/txbox"
)

// Sample returns r's sample (r is a *relay.Relay): its table's backlog,
// one query, and its state; a table that cannot be read is in the
// sample's Err.
var Sample func(ctx context.Context, r any) txbox.RelaySample
