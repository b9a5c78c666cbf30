package txboxsql

import (
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/txbox/txbox/internal/brokerurl"
)

// SQLiteDSN is the modernc.org/sqlite data source name txbox recommends for
// the SQLite file at path: write-ahead logging (readers never block the
// writer), a 10 s busy timeout, synchronous=NORMAL (durable at each WAL
// checkpoint, safe against corruption) and _txlock=immediate, so that every
// transaction takes the write lock at BEGIN and concurrent writers wait
// their turn instead of failing with SQLITE_BUSY when they upgrade a read
// lock. The characters of path that a file: URI would misread (%, #, ?)
// are escaped.
//
//	db, err := sql.Open("sqlite", txboxsql.SQLiteDSN("app.db"))
func SQLiteDSN(path string) string {
	path = strings.NewReplacer("%", "%25", "#", "%23", "?", "%3f").Replace(path)
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

// MySQLDSN converts a MySQL or MariaDB URL,
// mysql://user:pass@host:port/db?param=value (or mariadb://…), into the
// data source name of github.com/go-sql-driver/mysql,
// user:pass@tcp(host:port)/db?…, with parseTime=true, which txbox needs (it
// reads DATETIME columns as times), unless the URL sets parseTime itself.
// The port defaults to 3306; user name, password and database name are
// percent-decoded. The URL's query parameters are go-sql-driver's own
// (tls=true, clientFoundRows=true, …), passed on as they are: the driver
// checks them when it opens the DSN (mysql.ParseDSN checks them earlier).
//
//	dsn, err := txboxsql.MySQLDSN(os.Getenv("DATABASE_URL"))
//	…
//	db, err := sql.Open("mysql", dsn)
//
// The error reads after the name of the setting, and quotes no part of the
// URL, whose password it may hold: `malformed URL: …`, `want one database
// name …`.
func MySQLDSN(rawURL string) (string, error) {
	scheme, _, _ := strings.Cut(rawURL, "://")
	if scheme != "mysql" && scheme != "mariadb" {
		return "", errors.New("want a mysql:// or mariadb:// URL (mysql://user:pass@host:3306/db)")
	}
	u, err := brokerurl.Parse(rawURL)
	if err != nil {
		return "", err
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", errors.New("want one database name (mysql://user:pass@host:3306/db)")
	}
	user := u.User.Username()
	pass, _ := u.User.Password()
	if user == "" && pass != "" {
		// go-sql-driver's DSN has no place for a password without a user.
		return "", errors.New("a password needs a user name (mysql://user:pass@host:3306/db)")
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "3306") // [::1]:3306
	}
	if _, _, err := net.SplitHostPort(addr); err != nil || u.Hostname() == "" {
		return "", errors.New("no host (mysql://user:pass@host:3306/db)")
	}
	// As go-sql-driver's Config.FormatDSN writes it: the user and the
	// password as they are (the driver reads the password up to the last
	// '@'), the database name path-escaped.
	var b strings.Builder
	if user != "" {
		b.WriteString(user)
		if pass != "" {
			b.WriteString(":" + pass)
		}
		b.WriteString("@")
	}
	b.WriteString("tcp(" + addr + ")/" + url.PathEscape(db) + "?parseTime=true")
	if q := u.Query(); len(q) > 0 {
		b.WriteString("&" + q.Encode())
	}
	return b.String(), nil
}
