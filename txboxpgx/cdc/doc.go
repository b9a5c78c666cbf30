// Package cdc is txbox's log-based relay for PostgreSQL: it reads the rows
// inserted into the outbox table from the write-ahead log, through a
// logical replication slot and the pgoutput plugin, instead of claiming
// them from the table, and publishes them with the same txbox.Publisher the
// polling relay uses.
//
// The slot's confirmed LSN is the mark of what was delivered: a delivered
// row is never updated. The relay confirms an LSN only when every event
// committed up to it was acknowledged by the broker, so a relay that dies,
// or a server that crashes, leads to a duplicate and never to a loss.
// One relay per slot reads at a time; others wait on a lease and take over
// when it lapses.
//
// In message mode (Config.MessagePrefix, with txbox.Config.MessagePrefix
// on the writers' side) the events are logical decoding messages that Add
// wrote into the WAL, and the table holds only the dead letters.
//
//	pool, _ := pgxpool.New(ctx, url) // the caller owns and closes it
//	if err := cdc.CreateSlot(ctx, pool, cfg); err != nil { … } // once
//	r, err := cdc.New(pool, pub, cfg)
//	err = r.Start(ctx) // checks the slot, then relays in the background
//	…
//	err = r.Stop(ctx)  // or <-r.Stopped() and r.Err() when it stopped by itself
//
// See docs/guide/cdc.md for when to choose it, the server settings it
// needs, its guarantees and the windows that allow a duplicate.
package cdc
