package txboxsql

import "strings"

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
