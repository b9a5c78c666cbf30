package txboxpgx_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txbox/txbox/txboxpgx"
)

// IsPermanentConnectError accepts an unparsable connection string and the
// server's refusals for good (class 28, 3D000), bare and wrapped, and
// nothing a server down or restarting returns; IsMissingTable accepts
// 42P01 and 3F000 only.
func TestClassifyConnectAndMissingTable(t *testing.T) {
	_, parseErr := pgconn.ParseConfig("postgres://host:notaport/db")
	if parseErr == nil {
		t.Fatal("ParseConfig accepted a bad port")
	}
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	for _, c := range []struct {
		name             string
		err              error
		permanent, table bool
	}{
		{"parse config", parseErr, true, false},
		{"invalid password 28P01", pg("28P01"), true, false},
		{"invalid authorization 28000", fmt.Errorf("connect: %w", pg("28000")), true, false},
		{"no such database 3D000", pg("3D000"), true, false},
		{"shutting down 57P01", pg("57P01"), false, false},
		{"cannot connect now 57P03", pg("57P03"), false, false},
		{"too many connections 53300", pg("53300"), false, false},
		{"undefined table 42P01", fmt.Errorf("query: %w", pg("42P01")), false, true},
		{"invalid schema 3F000", pg("3F000"), false, true},
		{"undefined column 42703", pg("42703"), false, false},
		{"EOF", io.ErrUnexpectedEOF, false, false},
		{"other", errors.New("no such table: x"), false, false},
	} {
		if got := txboxpgx.IsPermanentConnectError(c.err); got != c.permanent {
			t.Errorf("%s: IsPermanentConnectError(%v) = %t, want %t", c.name, c.err, got, c.permanent)
		}
		if got := txboxpgx.IsMissingTable(c.err); got != c.table {
			t.Errorf("%s: IsMissingTable(%v) = %t, want %t", c.name, c.err, got, c.table)
		}
	}
}
