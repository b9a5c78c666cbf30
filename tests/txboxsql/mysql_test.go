package txboxsql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// MySQLError is a type of the same name as go-sql-driver's in another
// package: the Driver does not take it for the driver's.
type MySQLError struct{ Number uint16 }

func (e *MySQLError) Error() string { return fmt.Sprintf("Error %d", e.Number) }

// The Driver on MySQL classifies go-sql-driver/mysql's errors by itself,
// bare and wrapped, with no Options: the server's failures are transient,
// a lost deadlock is a conflict (and transient), its refusals of the data
// are rejections, and nothing else is any of these.
func TestMySQLClassifier(t *testing.T) {
	t.Parallel()
	drv := txboxsql.New(nil, txboxdriver.MySQL)
	sqlite := txboxsql.New(nil, txboxdriver.SQLite)
	type want struct{ transient, rejected, conflict bool }
	for _, c := range []struct {
		name string
		err  error
		want want
	}{
		{"ErrInvalidConn", mysql.ErrInvalidConn, want{transient: true}},
		{"1040 too many connections", &mysql.MySQLError{Number: 1040}, want{transient: true}},
		{"1053 server shutdown", &mysql.MySQLError{Number: 1053}, want{transient: true}},
		{"1205 lock wait timeout", &mysql.MySQLError{Number: 1205}, want{transient: true}},
		{"1213 deadlock", &mysql.MySQLError{Number: 1213}, want{transient: true, conflict: true}},
		{"2006 gone away", &mysql.MySQLError{Number: 2006}, want{transient: true}},
		{"2013 lost connection", &mysql.MySQLError{Number: 2013}, want{transient: true}},
		{"1048 null", &mysql.MySQLError{Number: 1048}, want{rejected: true}},
		{"1062 duplicate entry", &mysql.MySQLError{Number: 1062}, want{rejected: true}},
		{"1264 out of range", &mysql.MySQLError{Number: 1264}, want{rejected: true}},
		{"1366 incorrect value", &mysql.MySQLError{Number: 1366}, want{rejected: true}},
		{"1406 data too long", &mysql.MySQLError{Number: 1406}, want{rejected: true}},
		{"1451 foreign key parent", &mysql.MySQLError{Number: 1451}, want{rejected: true}},
		{"1452 foreign key child", &mysql.MySQLError{Number: 1452}, want{rejected: true}},
		{"3819 check constraint", &mysql.MySQLError{Number: 3819}, want{rejected: true}},
		{"1146 no such table", &mysql.MySQLError{Number: 1146}, want{}},
		{"1045 access denied", &mysql.MySQLError{Number: 1045}, want{}},
		{"same name, other package", &MySQLError{Number: 1213}, want{}},
		{"plain error", errors.New("cannot ship"), want{}},
	} {
		for _, wrap := range []struct {
			name string
			fn   func(error) error
		}{
			{"bare", func(e error) error { return e }},
			{"%w", func(e error) error { return fmt.Errorf("charge order: %w", e) }},
			{"errors.Join", func(e error) error { return errors.Join(errors.New("rollback failed"), e) }},
		} {
			err := wrap.fn(c.err)
			got := want{transient: drv.IsTransient(err), rejected: drv.IsRejected(err), conflict: drv.IsConflict(err)}
			if got != c.want {
				t.Errorf("%s (%s): got %+v, want %+v", c.name, wrap.name, got, c.want)
			}
			if sqlite.IsTransient(err) || sqlite.IsRejected(err) || sqlite.IsConflict(err) {
				t.Errorf("%s (%s): the SQLite driver classifies a MySQL error", c.name, wrap.name)
			}
		}
	}
}

// The errors a real MySQL or MariaDB server returns are classified: a
// duplicate key is a rejection, a lock wait timeout and a lost deadlock
// are transient, and the deadlock alone is a conflict.
func TestMySQLServerErrors(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	drv := txboxsql.New(db, txboxdriver.MySQL)
	ctx := context.Background()
	testenv.Must(t, testenv.Err(db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")), "create table")
	testenv.Must(t, testenv.Err(db.ExecContext(ctx, "INSERT INTO t VALUES (1, 0), (2, 0)")), "insert")

	_, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1, 0)")
	if err == nil || !drv.IsRejected(err) || drv.IsTransient(err) {
		t.Errorf("duplicate key: %v: rejected %t, transient %t; want a rejection", err, drv.IsRejected(err), drv.IsTransient(err))
	}

	// Lock wait timeout: tx1 holds row 1; tx2 waits at most a second.
	tx1, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	defer tx1.Rollback()
	testenv.Must(t, testenv.Err(tx1.ExecContext(ctx, "UPDATE t SET v = 1 WHERE id = 1")), "lock row 1")
	conn, err := db.Conn(ctx)
	testenv.Must(t, err, "conn")
	defer conn.Close()
	testenv.Must(t, testenv.Err(conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1")), "lock wait timeout")
	_, err = conn.ExecContext(ctx, "UPDATE t SET v = 2 WHERE id = 1")
	if err == nil || !drv.IsTransient(err) || drv.IsConflict(err) {
		t.Errorf("lock wait timeout: %v: transient %t, conflict %t; want transient, no conflict", err, drv.IsTransient(err), drv.IsConflict(err))
	}
	testenv.Must(t, tx1.Rollback(), "rollback")

	// Deadlock: a holds row 1 and b row 2; each then asks for the other's.
	a, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin a")
	defer a.Rollback()
	b, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin b")
	defer b.Rollback()
	testenv.Must(t, testenv.Err(a.ExecContext(ctx, "UPDATE t SET v = 3 WHERE id = 1")), "a locks 1")
	testenv.Must(t, testenv.Err(b.ExecContext(ctx, "UPDATE t SET v = 3 WHERE id = 2")), "b locks 2")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, step := range []struct {
		tx *sql.Tx
		id int
	}{{a, 2}, {b, 1}} {
		wg.Go(func() {
			_, errs[i] = step.tx.ExecContext(ctx, "UPDATE t SET v = 4 WHERE id = ?", step.id)
			if errs[i] != nil {
				_ = step.tx.Rollback() // the loser's locks go, the winner goes on
			}
		})
	}
	wg.Wait()
	lost := errors.Join(errs...)
	if lost == nil || !drv.IsTransient(lost) || !drv.IsConflict(lost) {
		t.Errorf("deadlock: %v: transient %t, conflict %t; want one transaction to lose, a transient conflict", lost, drv.IsTransient(lost), drv.IsConflict(lost))
	}
}

// Options.IsConflict widens Driver.IsConflict, and what it accepts is
// transient too (a conflict that loses every time is a database failure);
// other errors stay unclassified.
func TestOptionsIsConflict(t *testing.T) {
	t.Parallel()
	lost := errors.New("engine: transaction lost a conflict")
	drv := txboxsql.NewWithOptions(nil, txboxdriver.MySQL, txboxsql.Options{IsConflict: func(err error) bool { return errors.Is(err, lost) }})
	err := fmt.Errorf("charge order: %w", lost)
	if !drv.IsConflict(err) || !drv.IsTransient(err) || !txboxdriver.IsConflictFor[*sql.Tx](drv, err) {
		t.Errorf("%v: conflict %t, transient %t; want a transient conflict", err, drv.IsConflict(err), drv.IsTransient(err))
	}
	if other := errors.New("cannot ship"); drv.IsConflict(other) || drv.IsTransient(other) {
		t.Errorf("%v classified", other)
	}
}
