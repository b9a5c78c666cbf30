package outboxsql_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/migrate"
	"github.com/txbox/txbox/txboxsql"
)

func mysqlOutbox(t *testing.T) (*sql.DB, *txbox.Outbox[*sql.Tx]) {
	t.Helper()
	db := testenv.MySQL(t)
	drv := txboxsql.New(db, driver.MySQL)
	m, err := migrate.New(drv, migrate.Config{})
	testenv.Must(t, err, "migrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	return db, ob
}

// lockWaits counts the transactions of db's server waiting on a row lock.
func lockWaits(t *testing.T, db *sql.DB) int {
	var n int
	testenv.Must(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id IN (SELECT id FROM information_schema.PROCESSLIST WHERE db = DATABASE())").Scan(&n), "lock waits")
	return n
}

func waitFor(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	for lockWaits(t, db) < n {
		time.Sleep(5 * time.Millisecond)
	}
}

// keyOrder returns the payloads of key's rows in id order (the relay's
// delivery order).
func keyOrder(t *testing.T, db *sql.DB, key string) string {
	rows, err := db.Query("SELECT payload FROM txbox_outbox WHERE ordering_key = ? ORDER BY id", key)
	testenv.Must(t, err, "select")
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p []byte
		testenv.Must(t, rows.Scan(&p), "scan")
		out = append(out, string(p))
	}
	return strings.Join(out, ",")
}

// The trigger draws a keyed row's id only once the key's lock is held: a
// row added while another transaction holds the key gets an id larger than
// every row committed meanwhile, so id order is commit order.
func TestMySQLKeyOrderSingleRow(t *testing.T) {
	t.Parallel()
	db, ob := mysqlOutbox(t)
	ctx := context.Background()
	first, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	testenv.Must(t, ob.Add(ctx, first, txbox.Message{Topic: "t", Key: "k", Payload: []byte("first")}), "add first")

	done := make(chan error, 1)
	go func() {
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			if err = ob.Add(ctx, tx, txbox.Message{Topic: "t", Key: "k", Payload: []byte("second")}); err == nil {
				err = tx.Commit()
			}
		}
		done <- err
	}()
	waitFor(t, db, 1)
	// An unkeyed row commits while "second" waits for the key.
	testenv.Must(t, ob.AddNoTx(ctx, txbox.Message{Topic: "t", Payload: []byte("between")}), "add between")
	testenv.Must(t, first.Commit(), "commit first")
	testenv.Must(t, <-done, "second")
	var between, second int64
	testenv.Must(t, db.QueryRow("SELECT id FROM txbox_outbox WHERE payload = 'between'").Scan(&between), "id")
	testenv.Must(t, db.QueryRow("SELECT id FROM txbox_outbox WHERE payload = 'second'").Scan(&second), "id")
	if second < between {
		t.Fatalf("the waiting row's id %d was drawn before the wait (a row committed meanwhile has %d)", second, between)
	}
	if got := keyOrder(t, db, "k"); got != "first,second" {
		t.Fatalf("key order %s", got)
	}
}

// A multi-row INSERT reserves all its ids at its first row: Add locks its
// keys before the INSERT, so a multi-row Add that waits for a key still
// gets ids after the rows committed while it waited.
func TestMySQLKeyOrderMultiRow(t *testing.T) {
	t.Parallel()
	db, ob := mysqlOutbox(t)
	ctx := context.Background()
	holder, err := db.BeginTx(ctx, nil)
	testenv.Must(t, err, "begin")
	testenv.Must(t, ob.Add(ctx, holder, txbox.Message{Topic: "t", Key: "k2", Payload: []byte("c")}), "add c")

	var mu sync.Mutex
	var commits []string
	add := func(name string, msgs ...txbox.Message) chan error {
		done := make(chan error, 1)
		go func() {
			tx, err := db.BeginTx(ctx, nil)
			if err == nil {
				err = ob.Add(ctx, tx, msgs...)
			}
			if err == nil {
				mu.Lock()
				err = tx.Commit()
				commits = append(commits, name)
				mu.Unlock()
			}
			done <- err
		}()
		return done
	}
	b := add("b", txbox.Message{Topic: "t", Key: "k2", Payload: []byte("b")})
	waitFor(t, db, 1)
	a := add("a", txbox.Message{Topic: "t", Payload: []byte("u")}, txbox.Message{Topic: "t", Key: "k1", Payload: []byte("a1")}, txbox.Message{Topic: "t", Key: "k2", Payload: []byte("a")})
	waitFor(t, db, 2)
	testenv.Must(t, holder.Commit(), "commit holder")
	testenv.Must(t, <-b, "b")
	testenv.Must(t, <-a, "a")
	want := "c," + strings.Join(commits, ",")
	if got := keyOrder(t, db, "k2"); got != want {
		t.Fatalf("k2 in id order: %s; commit order: %s", got, want)
	}
}
