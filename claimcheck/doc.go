// Package claimcheck is the built-in txbox.ClaimCheck store: a table in the
// outbox's own database (PostgreSQL, SQLite, MySQL/MariaDB) that holds the
// payloads too large for the broker. Outbox.Add writes a payload in the
// caller's transaction, so that it commits with its message or not at all;
// the consumer reads it by reference before the handler runs; Sweep
// deletes payloads older than a retention period.
//
// The table is created by migrations (package migrate, ClaimCheckTables;
// `txbox migrate up --claim-check-table txbox_claim_check`). See
// docs/guide/claim-check.md.
package claimcheck
