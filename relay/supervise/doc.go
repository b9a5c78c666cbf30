// Package supervise runs the relays of many outbox tables (stores: tenants,
// schemas, databases) in one relay.Group, and keeps them running while their
// databases come and go.
//
// A Supervisor is given a list of stores, each naming its database by a
// string (a URL or DSN) that Config.Open turns into an open Database. It
// opens each distinct database once, in the background, so that a database
// down at start holds up its own stores only: a store joins the group once
// its database is open (and Config.Prepare, say a migration, has run on its
// table). A database that stays unreachable is tried again with a backoff;
// one that refuses for good (bad credentials, no such database), a table
// that cannot be prepared or is not migrated leaves its stores out until
// SetStores lists them again. SetStores changes the list while the
// supervisor runs: stores removed or changed leave the group after their
// round in flight, stores added or changed join it.
//
// The package imports no database library: the program's Open builds the
// drivers (txboxpgx, txboxsql) and relays, so the engines stay in the
// program's modules.
//
// Lifecycle: Start, Stop, Stopped, Err, as relay.Group. A supervisor may be
// started again once stopped (for example with a relay on a new broker
// connection after the previous one closed for good); the databases it
// opened stay open across runs until Close.
package supervise
