package txboxsql_test

import (
	"context"
	"database/sql"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxsql"
)

// FuzzMySQLDSN feeds any text to txboxsql.MySQLDSN. What it accepts is a
// mysql:// or mariadb:// URL with a host and one database name, and its
// DSN is the one go-sql-driver's Config.FormatDSN writes for the URL's
// user, password, host:port (3306 by default) and database with
// parseTime=true, followed by the URL's query; the driver reads it back to
// those values (unless a query parameter has a value it refuses). What it
// refuses, its error does not quote: no password of three bytes or more is
// in it.
func FuzzMySQLDSN(f *testing.F) {
	for _, s := range []string{
		"mysql://root:pw@127.0.0.1:3306/test", "mysql://u:p%40ss@h/db?parseTime=false", "mariadb://u@h/db?tls=true",
		"mysql://u:secret@h", "mysql://u:secret@/db", "mysql://u@h/a/b", "mysql://u@[::1]/db", "mysql://u@h/db?parseTime=maybe",
		"mysql://:secret@h/db", "mysql://u:se/cret@h/db", "mysql://u:a%zz@h/db", "mysql://h:bad/db", "mysql://u@h/d%20b",
		"postgres://u:secret@h/db", "mysql:/h/db", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		dsn, err := txboxsql.MySQLDSN(raw)
		if err != nil {
			for _, pw := range passwords(raw) {
				if len(pw) >= 3 && strings.Contains(err.Error(), pw) {
					t.Fatalf("MySQLDSN(%q): error quotes the password %q: %v", raw, pw, err)
				}
			}
			return
		}
		if !strings.HasPrefix(raw, "mysql://") && !strings.HasPrefix(raw, "mariadb://") {
			t.Fatalf("MySQLDSN(%q) = %q: accepted another scheme", raw, dsn)
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("MySQLDSN(%q) = %q: accepted a URL url.Parse refuses: %v", raw, dsn, err)
		}
		cfg := mysql.NewConfig()
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.Net, cfg.Addr = "tcp", u.Host
		if u.Port() == "" {
			cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		cfg.DBName = strings.TrimPrefix(u.Path, "/")
		cfg.ParseTime = true
		want := cfg.FormatDSN()
		if q := u.Query(); len(q) > 0 {
			want += "&" + q.Encode()
		}
		if dsn != want {
			t.Fatalf("MySQLDSN(%q) = %q, go-sql-driver writes %q", raw, dsn, want)
		}
		if u.Hostname() == "" || cfg.DBName == "" || strings.Contains(cfg.DBName, "/") || (cfg.User == "" && cfg.Passwd != "") {
			t.Fatalf("MySQLDSN(%q) = %q: want a host, one database and a user for a password", raw, dsn)
		}
		back, err := mysql.ParseDSN(dsn)
		if err != nil {
			if len(u.Query()) == 0 {
				t.Fatalf("MySQLDSN(%q) = %q: go-sql-driver refuses it: %v", raw, dsn, err)
			}
			return
		}
		if back.User != cfg.User || back.Passwd != cfg.Passwd || back.Addr != cfg.Addr || back.DBName != cfg.DBName || back.Net != "tcp" {
			t.Fatalf("MySQLDSN(%q) = %q reads back as user %q, password %q, addr %q, db %q", raw, dsn, back.User, back.Passwd, back.Addr, back.DBName)
		}
		if !u.Query().Has("parseTime") && !back.ParseTime {
			t.Fatalf("MySQLDSN(%q) = %q: no parseTime", raw, dsn)
		}
	})
}

// passwords are the passwords raw may hold: its userinfo's, as written and
// percent-decoded.
func passwords(raw string) []string {
	_, rest, _ := strings.Cut(raw, "://")
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return nil
	}
	_, pw, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return nil
	}
	out := []string{pw}
	if dec, err := url.PathUnescape(pw); err == nil && dec != pw {
		out = append(out, dec)
	}
	return out
}

// A mysql:// URL's DSN opens the database, and DATETIME columns read as
// times (parseTime=true).
func TestMySQLDSNOpens(t *testing.T) {
	t.Parallel()
	test := testenv.MySQL(t)
	ctx := context.Background()
	var name string
	testenv.Must(t, test.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name), "database name")
	dsn, err := txboxsql.MySQLDSN("mysql://root@127.0.0.1:3306/" + name)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var at time.Time
	if err := db.QueryRowContext(ctx, "SELECT CAST('2026-12-08 01:02:03' AS DATETIME)").Scan(&at); err != nil {
		t.Fatalf("DSN %q: %v", dsn, err)
	}
	if want := time.Date(2026, 12, 8, 1, 2, 3, 0, time.UTC); !at.Equal(want) {
		t.Fatalf("read %v, want %v", at, want)
	}
}
