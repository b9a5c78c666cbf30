package outboxsql_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

func mysqlOutbox(t *testing.T) (*sql.DB, *txbox.Outbox[*sql.Tx]) {
	t.Helper()
	db := testenv.MySQL(t)
	drv := txboxsql.New(db, txboxdriver.MySQL)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	return db, ob
}

// begin opens a transaction and returns it with its connection's id.
func begin(t *testing.T, db *sql.DB) (*sql.Tx, int64) {
	tx, err := db.Begin()
	testenv.Must(t, err, "begin")
	var id int64
	testenv.Must(t, tx.QueryRow("SELECT CONNECTION_ID()").Scan(&id), "connection id")
	return tx, id
}

// waitFor returns once the transaction of connection conn waits on a lock,
// or once fin is closed (it did not wait: the test then reports why).
func waitFor(t *testing.T, db *sql.DB, conn chan int64, fin chan struct{}) {
	t.Helper()
	id := <-conn
	for {
		select {
		case <-fin:
			return
		default:
		}
		var n int
		testenv.Must(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_mysql_thread_id = ?", id).Scan(&n), "lock waits")
		if n > 0 {
			return
		}
		// InnoDB refreshes INNODB_TRX only when it was not read for
		// 0.1 s: polling faster would keep showing a stale picture.
		time.Sleep(150 * time.Millisecond)
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
	testenv.Must(t, testenv.Err(ob.Add(ctx, first, txbox.Message{Topic: "t", Key: "k", Payload: []byte("first")})), "add first")

	done := make(chan error, 1)
	conn, fin := make(chan int64, 1), make(chan struct{})
	go func() {
		defer close(fin)
		tx, id := begin(t, db)
		conn <- id
		_, err := ob.Add(ctx, tx, txbox.Message{Topic: "t", Key: "k", Payload: []byte("second")})
		if err == nil {
			err = tx.Commit()
		}
		done <- err
	}()
	waitFor(t, db, conn, fin)
	// An unkeyed row commits while "second" waits for the key.
	testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "t", Payload: []byte("between")})), "add between")
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
	testenv.Must(t, testenv.Err(ob.Add(ctx, holder, txbox.Message{Topic: "t", Key: "k2", Payload: []byte("c")})), "add c")

	var mu sync.Mutex
	var commits []string
	add := func(name string, msgs ...txbox.Message) chan error {
		done := make(chan error, 1)
		conn, fin := make(chan int64, 1), make(chan struct{})
		go func() {
			defer close(fin)
			tx, id := begin(t, db)
			conn <- id
			_, err := ob.Add(ctx, tx, msgs...)
			if err == nil {
				mu.Lock()
				err = tx.Commit()
				commits = append(commits, name)
				mu.Unlock()
			}
			done <- err
		}()
		waitFor(t, db, conn, fin)
		return done
	}
	b := add("b", txbox.Message{Topic: "t", Key: "k2", Payload: []byte("b")})
	a := add("a", txbox.Message{Topic: "t", Payload: []byte("u")}, txbox.Message{Topic: "t", Key: "k1", Payload: []byte("a1")}, txbox.Message{Topic: "t", Key: "k2", Payload: []byte("a")})
	testenv.Must(t, holder.Commit(), "commit holder")
	testenv.Must(t, <-b, "b")
	testenv.Must(t, <-a, "a")
	want := "c," + strings.Join(commits, ",")
	if got := keyOrder(t, db, "k2"); got != want {
		t.Fatalf("k2 in id order: %s; commit order: %s", got, want)
	}
}
