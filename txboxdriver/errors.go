package txboxdriver

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// ErrorClassifier is an optional capability of a Driver: recognising the
// errors of its database library that say the database failed — the
// connection was lost, the server is shutting down or overloaded, the
// transaction lost a deadlock — rather than the statement or the data.
// txbox asks a Driver for it with a type assertion and adds its answer to
// IsTransient's; see IsTransientFor. txboxpgx and txboxsql implement it.
// IsTransient must be quick, must not block and must see through wrapping
// (errors.Is, errors.As).
type ErrorClassifier interface {
	IsTransient(err error) bool
}

// IsTransient reports whether err, or any error it wraps, says that the
// database failed rather than the work that was asked of it: a retry of the
// same work, on a new connection or a new transaction, may succeed. It
// needs no database library; it recognises
//
//   - database/sql's driver.ErrBadConn and sql.ErrConnDone;
//   - io.ErrUnexpectedEOF (a connection closed mid-message; a plain io.EOF
//     is not counted, too many things that are not connections return it);
//   - a net.Error (a failed dial, read or write; a timeout of the network,
//     not a context.DeadlineExceeded, which also satisfies net.Error) and
//     the errnos ECONNRESET, ECONNREFUSED, ECONNABORTED and EPIPE;
//   - an error with a SafeToRetry() bool method that returns true (pgconn:
//     nothing was sent);
//   - an error with an SQLState() string method (pgconn.PgError, lib/pq)
//     that TransientSQLState accepts.
//
// Errors only a driver's own types tell apart (MySQL's error numbers,
// SQLite's result codes) are the driver's ErrorClassifier's to recognise.
func IsTransient(err error) bool {
	return err != nil && (databaseSays(err) || IsNetwork(err))
}

// databaseSays reports whether err carries a database library's or the
// database's own word that the database failed: database/sql's ErrBadConn
// or ErrConnDone, SafeToRetry, a transient SQLSTATE.
func databaseSays(err error) bool {
	if errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	var retry interface{ SafeToRetry() bool }
	if errors.As(err, &retry) && retry.SafeToRetry() {
		return true
	}
	var state interface{ SQLState() string }
	return errors.As(err, &state) && TransientSQLState(state.SQLState())
}

// IsNetwork reports whether err, or any error it wraps, is a failure of a
// network connection, whatever it connected to: io.ErrUnexpectedEOF, the
// errnos ECONNRESET, ECONNREFUSED, ECONNABORTED and EPIPE, a net.Error that
// is not a context's deadline or cancellation. IsTransient accepts these;
// a handler's call to another service (an HTTP request that timed out)
// fails with them too, which is why the consumer counts them as the
// database's only when they come from its own connection (see
// IsDatabaseTransientFor).
func IsNetwork(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// TransientSQLState reports whether an SQLSTATE (PostgreSQL's spelling)
// says the database failed rather than the statement: class 08
// (connection exception), class 53 (insufficient resources: disk full, out
// of memory, too many connections), class 58 (system error: an I/O error
// of the server), 57P01, 57P02, 57P03 and 57P05 (shutdown, crash, cannot
// connect now, idle session timeout), the conflicts ConflictSQLState
// accepts, and 55P03 (lock not available).
func TransientSQLState(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"), strings.HasPrefix(code, "58"):
		return len(code) == 5
	}
	switch code {
	case "57P01", "57P02", "57P03", "57P05", "55P03":
		return true
	}
	return ConflictSQLState(code)
}

// ConflictSQLState reports whether an SQLSTATE says the transaction lost
// to a concurrent one and was rolled back, so that running the same work
// again at once will likely succeed: 40001 (serialization failure) and
// 40P01 (deadlock detected).
func ConflictSQLState(code string) bool { return code == "40001" || code == "40P01" }

// IsConflict reports whether err, or any error it wraps, has an SQLSTATE
// (a SQLState() string method) that ConflictSQLState accepts: a deadlock
// or a serialization failure. Errors that carry no SQLSTATE (MySQL's error
// numbers) are the driver's ConflictClassifier's to recognise; see
// IsConflictFor.
func IsConflict(err error) bool {
	var state interface{ SQLState() string }
	return errors.As(err, &state) && ConflictSQLState(state.SQLState())
}

// ConflictClassifier is an optional capability of a Driver: recognising
// the errors of its database library that say the transaction lost to a
// concurrent one (a deadlock, a serialization failure) and was rolled
// back, so that the same work run again at once will likely succeed.
// txbox asks a Driver for it with a type assertion; see IsConflictFor.
// txboxsql implements it. Every error it accepts must also be one its
// ErrorClassifier accepts (a conflict that loses every time it runs again
// is a database failure). IsConflict must be quick, must not block and
// must see through wrapping.
type ConflictClassifier interface {
	IsConflict(err error) bool
}

// IsConflictFor is IsConflict, widened by d's ConflictClassifier if d has
// one.
func IsConflictFor[TTx any](d Driver[TTx], err error) bool {
	if err == nil {
		return false
	}
	if IsConflict(err) {
		return true
	}
	if c, ok := d.(ConflictClassifier); ok {
		return c.IsConflict(err)
	}
	return false
}

// RejectionClassifier is an optional capability of a Driver: recognising
// the errors of its database library that say the database refused the
// work itself (see IsRejected). txbox asks a Driver for it with a type
// assertion; see IsRejectedFor. txboxpgx and txboxsql implement it.
type RejectionClassifier interface {
	IsRejected(err error) bool
}

// IsRejected reports whether err, or any error it wraps, says that the
// database refused the work itself — its data, or the state the work left
// its transaction in — so that the same work fails again however often it
// is retried: an error with an SQLState() string method in class 22 (data
// exception), class 23 (integrity constraint violation, also a deferred
// constraint checked at COMMIT), 25P02 (in failed SQL transaction: an
// earlier statement failed and its error was ignored), 27000 or P0001 (a
// trigger refused it). It is false for
// whatever IsTransient accepts.
func IsRejected(err error) bool {
	if err == nil || IsTransient(err) {
		return false
	}
	var state interface{ SQLState() string }
	return errors.As(err, &state) && RejectedSQLState(state.SQLState())
}

// RejectedSQLState reports whether an SQLSTATE says the database refused
// the work itself: class 22 (data exception), class 23 (integrity
// constraint violation), 25P02 (in failed SQL transaction), 27000
// (triggered data change violation) and P0001 (a trigger's or function's
// RAISE EXCEPTION).
func RejectedSQLState(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code {
	case "25P02", "27000", "P0001":
		return true
	}
	return strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23")
}

// IsRejectedFor is IsRejected, widened by d's RejectionClassifier if d has
// one; never true of an error IsTransientFor accepts.
func IsRejectedFor[TTx any](d Driver[TTx], err error) bool {
	if err == nil || IsTransientFor(d, err) {
		return false
	}
	if IsRejected(err) {
		return true
	}
	if c, ok := d.(RejectionClassifier); ok {
		return c.IsRejected(err)
	}
	return false
}

// IsDatabaseTransientFor is IsTransientFor without its bare network
// failures (IsNetwork): true when a database library or the database
// itself says the database failed — database/sql's ErrBadConn or
// ErrConnDone, SafeToRetry, a transient SQLSTATE, d's ErrorClassifier.
func IsDatabaseTransientFor[TTx any](d Driver[TTx], err error) bool {
	if err == nil {
		return false
	}
	if databaseSays(err) {
		return true
	}
	if c, ok := d.(ErrorClassifier); ok {
		return c.IsTransient(err)
	}
	return false
}

// IsTransientFor is IsTransient, widened by d's ErrorClassifier if d has
// one.
func IsTransientFor[TTx any](d Driver[TTx], err error) bool {
	if err == nil {
		return false
	}
	if IsTransient(err) {
		return true
	}
	if c, ok := d.(ErrorClassifier); ok {
		return c.IsTransient(err)
	}
	return false
}

// MissingTableClassifier is an optional capability of a Driver:
// recognising the errors of its database library that say a table (or
// the schema or database holding it) named in a statement does not exist.
// txbox asks a Driver for it with a type assertion; see IsMissingTableFor.
// txboxpgx and txboxsql implement it. IsMissingTable must be quick, must
// not block and must see through wrapping.
type MissingTableClassifier interface {
	IsMissingTable(err error) bool
}

// IsMissingTableFor reports whether err, or any error it wraps, says a
// table named in a statement does not exist: an SQLSTATE (a SQLState()
// string method: pgconn.PgError, lib/pq) of 42P01 (undefined table) or
// 3F000 (invalid schema name), or what d's MissingTableClassifier
// accepts. A missing column or function is not a missing table.
func IsMissingTableFor[TTx any](d Driver[TTx], err error) bool {
	if err == nil {
		return false
	}
	var state interface{ SQLState() string }
	if errors.As(err, &state) && (state.SQLState() == "42P01" || state.SQLState() == "3F000") {
		return true
	}
	if c, ok := d.(MissingTableClassifier); ok {
		return c.IsMissingTable(err)
	}
	return false
}
