// Package txbox is the transactional outbox for Go services.
//
// A service writes its business change and the events it must emit in one
// database transaction with [Outbox.Add]; a relay (package relay) delivers the
// committed events to a broker at least once. The core is generic over the
// caller's transaction type: pgx.Tx through package txboxpgx, *sql.Tx (and so
// GORM, Bun, sqlx and ent) through package txboxsql.
//
// The outbox table is a stable SQL contract (docs/reference/sql-contract.md): a service
// written in another language may INSERT rows with plain SQL and the relay
// delivers them. Tables are created by migrations (package txboxmigrate, or
// `txbox migrate up`), never implicitly inside a caller's transaction.
package txbox
