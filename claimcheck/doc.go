// Package claimcheck is the built-in txbox.ClaimCheck store: a table in the
// outbox's own database (PostgreSQL, SQLite, MySQL/MariaDB) that holds the
// payloads too large for the broker. Outbox.Add writes a payload in the
// caller's transaction, so that it commits with its message or not at all;
// the consumer reads it by reference before the handler runs; Sweep
// deletes the payloads both sides are done with: kept while their message
// is still to deliver or dead, then for Config.Retention (a relay's
// cleanup runs it for the stores of relay.Config.ClaimChecks). Stats reads the
// figures the dashboard shows.
//
// The table is created by migrations (package txboxmigrate, ClaimCheckTables;
// `txbox migrate up --claim-check-table txbox_claim_check`). See
// docs/guide/claim-check.md.
package claimcheck
