package txboxsql_test

import (
	"fmt"

	"github.com/txbox/txbox/txboxsql"
)

func ExampleSQLiteDSN() {
	// sql.Open("sqlite", dsn) with modernc.org/sqlite imported.
	fmt.Println(txboxsql.SQLiteDSN("data/app#1.db"))
	// Output:
	// file:data/app%231.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_txlock=immediate
}

func ExampleMySQLDSN() {
	// sql.Open("mysql", dsn) with github.com/go-sql-driver/mysql imported.
	dsn, err := txboxsql.MySQLDSN("mysql://app:s%40cret@db.internal/orders?tls=true")
	if err != nil {
		panic(err)
	}
	fmt.Println(dsn)
	// Output:
	// app:s@cret@tcp(db.internal:3306)/orders?parseTime=true&tls=true
}
