package driver

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
//     in class 08 (connection exception) or 53 (insufficient resources),
//     or 57P01, 57P02, 57P03 (administrator or crash shutdown, cannot
//     connect now), 40001 (serialization failure), 40P01 (deadlock) and
//     55P03 (lock not available).
//
// Errors only a driver's own types tell apart (MySQL's error numbers,
// SQLite's result codes) are the driver's ErrorClassifier's to recognise.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, sqldriver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	}
	var retry interface{ SafeToRetry() bool }
	if errors.As(err, &retry) && retry.SafeToRetry() {
		return true
	}
	var state interface{ SQLState() string }
	if errors.As(err, &state) && TransientSQLState(state.SQLState()) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return true
	}
	return false
}

// TransientSQLState reports whether an SQLSTATE (PostgreSQL's spelling)
// says the database failed rather than the statement: class 08
// (connection exception), class 53 (insufficient resources: disk full, out
// of memory, too many connections), 57P01, 57P02 and 57P03 (shutdown,
// crash, cannot connect now), 40001 (serialization failure), 40P01
// (deadlock detected) and 55P03 (lock not available).
func TransientSQLState(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return len(code) == 5
	}
	switch code {
	case "57P01", "57P02", "57P03", "40001", "40P01", "55P03":
		return true
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
