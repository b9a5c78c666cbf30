package txboxsql_test

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/txbox/txbox/txboxsql"
)

// IsPermanentConnectError accepts go-sql-driver/mysql's refusals for good
// (1044, 1045, 1049), bare and wrapped, and not a server gone or a type of
// the same name from another package; IsMissingTable accepts 1146, 1049
// and SQLite's "no such table".
func TestClassifyConnectAndMissingTable(t *testing.T) {
	my := func(n uint16) error { return &mysql.MySQLError{Number: n, Message: "m"} }
	for _, c := range []struct {
		name             string
		err              error
		permanent, table bool
	}{
		{"access denied to database 1044", my(1044), true, false},
		{"access denied 1045", fmt.Errorf("connect: %w", my(1045)), true, false},
		{"unknown database 1049", my(1049), true, true},
		{"too many connections 1040", my(1040), false, false},
		{"server shutdown 1053", my(1053), false, false},
		{"gone away 2006", my(2006), false, false},
		{"no such table 1146", fmt.Errorf("query: %w", my(1146)), false, true},
		{"duplicate 1062", my(1062), false, false},
		{"look-alike type 1045", &MySQLError{Number: 1045}, false, false},
		{"look-alike type 1146", &MySQLError{Number: 1146}, false, false},
		{"bad conn", driver.ErrBadConn, false, false},
		{"sqlite no such table", fmt.Errorf("query: %w", errors.New("SQL logic error: no such table: outbox (1)")), false, true},
		{"nil", nil, false, false},
	} {
		if got := txboxsql.IsPermanentConnectError(c.err); got != c.permanent {
			t.Errorf("%s: IsPermanentConnectError(%v) = %t, want %t", c.name, c.err, got, c.permanent)
		}
		if got := txboxsql.IsMissingTable(c.err); got != c.table {
			t.Errorf("%s: IsMissingTable(%v) = %t, want %t", c.name, c.err, got, c.table)
		}
	}
}
