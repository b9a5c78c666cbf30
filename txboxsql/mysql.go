package txboxsql

import (
	"errors"
	"reflect"
	"strings"

	"github.com/txbox/txbox/txboxdriver"
)

// mysqlErrorType is where go-sql-driver/mysql declares MySQLError, the
// error type whose Number field holds the server's error number.
const mysqlErrorType = "github.com/go-sql-driver/mysql.MySQLError"

// mysqlNumber returns the server error number of the first
// go-sql-driver/mysql *MySQLError in err's chain. txboxsql imports no
// engine, so it recognises the type by its package path and name and reads
// its Number field by reflection.
func mysqlNumber(err error) (uint16, bool) {
	var num uint16
	found := false
	walk(err, func(e error) bool {
		v := reflect.ValueOf(e)
		if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
			return false
		}
		t := v.Elem().Type()
		if t.PkgPath()+"."+t.Name() != mysqlErrorType {
			return false
		}
		f := v.Elem().FieldByName("Number")
		if !f.IsValid() || f.Kind() != reflect.Uint16 {
			return false
		}
		num, found = uint16(f.Uint()), true
		return true
	})
	return num, found
}

// mysqlInvalidConn reports whether err's chain holds go-sql-driver/mysql's
// ErrInvalidConn, a plain errors.New("invalid connection") the driver
// returns when it finds its connection broken after sending a statement.
func mysqlInvalidConn(err error) bool {
	return walk(err, func(e error) bool {
		return e.Error() == "invalid connection" && reflect.TypeOf(e).String() == "*errors.errorString"
	})
}

// pgConnClosed reports whether err's chain holds pgx's pgconn.ErrConnClosed,
// a plain errors.New("conn closed") pgx returns for a statement on a
// connection it found broken.
func pgConnClosed(err error) bool {
	return walk(err, func(e error) bool {
		return e.Error() == "conn closed" && reflect.TypeOf(e).String() == "*errors.errorString"
	})
}

// walk calls f on err and every error it wraps, depth first, until f
// returns true; it reports whether f did.
func walk(err error, f func(error) bool) bool {
	for err != nil {
		if f(err) {
			return true
		}
		if multi, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range multi.Unwrap() {
				if walk(e, f) {
					return true
				}
			}
			return false
		}
		err = errors.Unwrap(err)
	}
	return false
}

// mysqlTransient reports whether err says the MySQL server or the
// connection failed rather than the statement: go-sql-driver's
// ErrInvalidConn, a conflict (mysqlConflict), and the error numbers 1040
// (too many connections), 1053 (server shutdown), 1205 (lock wait
// timeout), 2006 and 2013 (server gone away, connection lost).
func mysqlTransient(err error) bool {
	if mysqlInvalidConn(err) || mysqlConflict(err) {
		return true
	}
	n, ok := mysqlNumber(err)
	if !ok {
		return false
	}
	switch n {
	case 1040, 1053, 1205, 2006, 2013:
		return true
	}
	return false
}

// mysqlConflict reports whether err says the transaction lost a deadlock
// and the server rolled it back: the error number 1213 (ER_LOCK_DEADLOCK,
// SQLSTATE 40001). A lock wait timeout (1205) is not one: the server rolls
// back only the statement, and the transaction holding the lock may hold it
// as long again.
func mysqlConflict(err error) bool {
	n, ok := mysqlNumber(err)
	return ok && n == 1213
}

// mysqlRejected reports whether err says MySQL refused the data itself:
// the error numbers 1048 (column cannot be null), 1062 (duplicate entry),
// 1264 (out of range), 1366 (incorrect value), 1406 (data too long), 1451
// and 1452 (foreign key), 3819 (check constraint).
func mysqlRejected(err error) bool {
	n, ok := mysqlNumber(err)
	if !ok {
		return false
	}
	switch n {
	case 1048, 1062, 1264, 1366, 1406, 1451, 1452, 3819:
		return true
	}
	return false
}

// IsPermanentConnectError reports whether err, from opening or pinging a
// MySQL database through go-sql-driver/mysql, is the server refusing the
// connection for good, so that trying again does not help: the error
// numbers 1044 (access denied to the database), 1045 (access denied: user
// or password) and 1049 (unknown database). A server that is down,
// restarting or unreachable is not one.
func IsPermanentConnectError(err error) bool {
	n, ok := mysqlNumber(err)
	if !ok {
		return false
	}
	switch n {
	case 1044, 1045, 1049:
		return true
	}
	return false
}

// IsMissingTable reports whether err says a table or database named in a
// statement does not exist: MySQL's error numbers 1146 (no such table) and
// 1049 (unknown database), SQLite's "no such table".
func IsMissingTable(err error) bool {
	if err == nil {
		return false
	}
	if n, ok := mysqlNumber(err); ok {
		return n == 1146 || n == 1049
	}
	return strings.Contains(err.Error(), "no such table")
}

// IsMissingTable implements txboxdriver.MissingTableClassifier with the
// package's IsMissingTable.
func (d *Driver) IsMissingTable(err error) bool { return IsMissingTable(err) }

var _ txboxdriver.MissingTableClassifier = (*Driver)(nil)
