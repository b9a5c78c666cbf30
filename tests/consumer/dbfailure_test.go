package consumer_test

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxsql"
)

// retryable is an error with pgconn's SafeToRetry method.
type retryable struct{ safe bool }

func (r retryable) Error() string     { return "retryable" }
func (r retryable) SafeToRetry() bool { return r.safe }

// sqliteBusy returns a real SQLITE_BUSY from modernc.org/sqlite: a second
// connection asks for the write lock a first one holds, without waiting.
func sqliteBusy(t *testing.T) error {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "busy.db")+"?_pragma=busy_timeout(0)")
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctx, "CREATE TABLE t (x int)")
	testenv.Must(t, err, "create")
	c1, err := db.Conn(ctx)
	testenv.Must(t, err, "conn 1")
	defer c1.Close()
	c2, err := db.Conn(ctx)
	testenv.Must(t, err, "conn 2")
	defer c2.Close()
	_, err = c1.ExecContext(ctx, "BEGIN IMMEDIATE")
	testenv.Must(t, err, "begin 1")
	defer func() { _, _ = c1.ExecContext(ctx, "ROLLBACK") }()
	_, err = c2.ExecContext(ctx, "BEGIN IMMEDIATE")
	if err == nil {
		t.Fatal("a second writer got the lock")
	}
	return err
}

// Every kind of database failure the consumer must retry without counting,
// and errors that are the statement's or the message's, through each
// classifier: txboxdriver.IsTransient alone (no database library), and
// txboxdriver.IsTransientFor with txboxpgx's, txboxsql's on SQLite, and
// txboxsql's on MySQL with and without the program's classifier.
func TestClassifyDatabaseErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"} }
	// Real pgconn connect errors: a port nobody listens on, a database
	// that does not exist (the server refuses for good).
	_, refused := pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:1/test?connect_timeout=2")
	_, noDB := pgconn.Connect(ctx, strings.Replace(testenv.PostgresURL(), "/test?", "/txbox_no_such_db?", 1))
	busy := sqliteBusy(t)

	pgxDrv := txboxpgx.New(nil)
	sqliteDrv := txboxsql.New(nil, txboxdriver.SQLite)
	mysqlDrv := txboxsql.New(nil, txboxdriver.MySQL)
	// want: core (txboxdriver.IsTransient), pgx, sqlite, mysql.
	type want struct{ core, pgx, sqlite, mysql bool }
	all, none := want{true, true, true, true}, want{}
	cases := []struct {
		name string
		err  error
		want want
	}{
		{"pg 57P01 admin shutdown", pg("57P01"), all},
		{"pg 57P02 crash shutdown", pg("57P02"), all},
		{"pg 57P03 cannot connect now", pg("57P03"), all},
		{"pg 08006 connection failure", pg("08006"), all},
		{"pg 08001 cannot establish", pg("08001"), all},
		{"pg 53300 too many connections", pg("53300"), all},
		{"pg 53100 disk full", pg("53100"), all},
		{"pg 40001 serialization", pg("40001"), all},
		{"pg 40P01 deadlock", pg("40P01"), all},
		{"pg 55P03 lock not available", pg("55P03"), all},
		{"pg 58030 io error", pg("58030"), all},
		{"pg 57P05 idle session timeout", pg("57P05"), all},
		{"pg 23505 unique violation", pg("23505"), none},
		{"pg 42P01 undefined table", pg("42P01"), none},
		{"pg 22P02 invalid text", pg("22P02"), none},
		{"pg 57014 query canceled", pg("57014"), none},
		{"pgconn connect refused", refused, all},
		{"pgconn connect to a missing database", noDB, none},
		{"SafeToRetry true", retryable{true}, all},
		{"SafeToRetry false", retryable{false}, none},
		{"driver.ErrBadConn", sqldriver.ErrBadConn, all},
		{"sql.ErrConnDone", sql.ErrConnDone, all},
		{"io.ErrUnexpectedEOF", io.ErrUnexpectedEOF, all},
		{"pgconn.ErrConnClosed (a statement on a broken connection)", fmt.Errorf("probe: %w", pgconn.ErrConnClosed), want{pgx: true}},
		{"net.OpError reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, all},
		{"ECONNREFUSED", syscall.ECONNREFUSED, all},
		{"EPIPE", syscall.EPIPE, all},
		{"mysql.ErrInvalidConn", mysql.ErrInvalidConn, want{mysql: true}},
		{"mysql 1205 lock wait timeout", &mysql.MySQLError{Number: 1205}, want{mysql: true}},
		{"mysql 1213 deadlock", &mysql.MySQLError{Number: 1213}, want{mysql: true}},
		{"mysql 2006 gone away", &mysql.MySQLError{Number: 2006}, want{mysql: true}},
		{"mysql 2013 lost connection", &mysql.MySQLError{Number: 2013}, want{mysql: true}},
		{"mysql 1062 duplicate entry", &mysql.MySQLError{Number: 1062}, none},
		{"sqlite busy", busy, want{sqlite: true}},
		{"io.EOF", io.EOF, none},
		{"context deadline", context.DeadlineExceeded, none},
		{"context canceled", context.Canceled, none},
		{"plain error", errors.New("cannot ship"), none},
		{"nil", nil, none},
	}
	for _, tc := range cases {
		for _, wrap := range []struct {
			name string
			fn   func(error) error
		}{
			{"bare", func(e error) error { return e }},
			{"handler %w", func(e error) error { return fmt.Errorf("charge order: %w", e) }},
			{"inbox.HandlerError", func(e error) error {
				return fmt.Errorf("outer: %w", &inbox.HandlerError{Source: "s", MessageID: "m", Err: fmt.Errorf("txbox: add: %w", e)})
			}},
			{"errors.Join", func(e error) error { return errors.Join(errors.New("rollback failed"), e) }},
		} {
			err := tc.err
			if err != nil {
				err = wrap.fn(err)
			}
			got := want{
				core:   txboxdriver.IsTransient(err),
				pgx:    txboxdriver.IsTransientFor[pgx.Tx](pgxDrv, err),
				sqlite: txboxdriver.IsTransientFor[*sql.Tx](sqliteDrv, err),
				mysql:  txboxdriver.IsTransientFor[*sql.Tx](mysqlDrv, err),
			}
			if got != tc.want {
				t.Errorf("%s (%s): %v: got %+v, want %+v", tc.name, wrap.name, err, got, tc.want)
			}
		}
	}
}

// The errors that say the database refused the work itself (its data, or
// the transaction the handler left aborted): counted against the message
// (txboxdriver.IsRejectedFor), never a database failure; and the conflicts run
// again at once (txboxdriver.IsConflictFor, through txboxsql's MySQL
// classifier). Through each classifier, bare and
// wrapped as the inbox wraps a commit's error.
func TestClassifyRejectedErrors(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"} }
	constraint := sqliteConstraint(t)
	pgxDrv := txboxpgx.New(nil)
	sqliteDrv := txboxsql.New(nil, txboxdriver.SQLite)
	mysqlDrv := txboxsql.New(nil, txboxdriver.MySQL)
	// want: core (txboxdriver.IsRejected), pgx, sqlite, mysql; and IsConflictFor
	// (MySQL's driver: the SQLSTATEs and go-sql-driver's error numbers).
	type want struct{ core, pgx, sqlite, mysql, conflict bool }
	all := want{true, true, true, true, false}
	cases := []struct {
		name string
		err  error
		want want
	}{
		{"pg 23503 foreign key (deferred, at COMMIT)", pg("23503"), all},
		{"pg 23505 unique", pg("23505"), all},
		{"pg 23514 check", pg("23514"), all},
		{"pg 22001 string too long", pg("22001"), all},
		{"pg 22P02 invalid text", pg("22P02"), all},
		{"pg 25P02 in failed transaction", pg("25P02"), all},
		{"pg 27000 triggered data change violation", pg("27000"), all},
		{"pg P0001 a trigger's RAISE EXCEPTION (deferred, at COMMIT)", pg("P0001"), all},
		{"pg 42501 permission denied", pg("42501"), want{}},
		{"pgx commit became a rollback", pgx.ErrTxCommitRollback, want{pgx: true}},
		{"sqlite constraint", constraint, want{sqlite: true}},
		{"mysql 1452 foreign key", &mysql.MySQLError{Number: 1452}, want{mysql: true}},
		{"mysql 1213 deadlock", &mysql.MySQLError{Number: 1213}, want{conflict: true}},
		{"mysql 1205 lock wait timeout", &mysql.MySQLError{Number: 1205}, want{}},
		{"pg 40P01 deadlock", pg("40P01"), want{conflict: true}},
		{"pg 40001 serialization", pg("40001"), want{conflict: true}},
		{"pg 08006 connection failure", pg("08006"), want{}},
		{"pg 42P01 undefined table", pg("42P01"), want{}},
		{"pg 57014 query canceled", pg("57014"), want{}},
		{"plain error", errors.New("cannot ship"), want{}},
		{"nil", nil, want{}},
	}
	for _, tc := range cases {
		for _, wrap := range []struct {
			name string
			fn   func(error) error
		}{
			{"bare", func(e error) error { return e }},
			{"inbox commit", func(e error) error { return fmt.Errorf("txbox/inbox: commit: %w", e) }},
			{"inbox.BatchError", func(e error) error { return &inbox.BatchError{Op: "commit", Err: e} }},
		} {
			err := tc.err
			if err != nil {
				err = wrap.fn(err)
			}
			got := want{
				core:     txboxdriver.IsRejected(err),
				pgx:      txboxdriver.IsRejectedFor[pgx.Tx](pgxDrv, err),
				sqlite:   txboxdriver.IsRejectedFor[*sql.Tx](sqliteDrv, err),
				mysql:    txboxdriver.IsRejectedFor[*sql.Tx](mysqlDrv, err),
				conflict: txboxdriver.IsConflictFor[*sql.Tx](mysqlDrv, err),
			}
			if got != tc.want {
				t.Errorf("%s (%s): %v: got %+v, want %+v", tc.name, wrap.name, err, got, tc.want)
			}
		}
	}
}

// sqliteConstraint returns a real SQLITE_CONSTRAINT from modernc.org/sqlite.
func sqliteConstraint(t *testing.T) error {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "constraint.db"))
	testenv.Must(t, err, "open")
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctx, "CREATE TABLE t (x int PRIMARY KEY)")
	testenv.Must(t, err, "create")
	_, err = db.ExecContext(ctx, "INSERT INTO t VALUES (1), (1)")
	if err == nil {
		t.Fatal("a duplicate primary key was accepted")
	}
	return err
}

// logCount counts the lines of a text log that contain every one of subs.
func logCount(log *testenv.Buffer, subs ...string) int {
	n := 0
	for _, line := range strings.Split(log.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}

const dbFailedLog = "the database failed"

// loggedConsumer returns a consumer of b with MaxDeliveries maxDeliveries, a
// backoff of 5 to 50 ms, and a text log the test reads.
func loggedConsumer(t *testing.T, d db[pgx.Tx], b *broker, maxDeliveries int) (*consumer.Consumer[pgx.Tx], *testenv.Buffer) {
	t.Helper()
	log := &testenv.Buffer{}
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, MaxDeliveries: maxDeliveries,
		BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	testenv.Must(t, err, "consumer.New")
	return c, log
}

// The database connection is cut (every connection closed, new ones
// refused for 300 ms) every 700 ms, or later when nothing was applied
// since the last cut, while 800 messages flow, with
// MaxDeliveries 2. The handler writes a row and adds an outbox message in
// the inbox transaction, wrapping Add's error. No message is dead-lettered,
// every effect is applied exactly once, every failure is a database
// failure, counted in Stats.DatabaseFailures and logged once.
func TestDatabaseOutageNeverDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, proxy, schema := testenv.PostgresThrough(t, 10)
	d := db[pgx.Tx]{name: "pgx-proxied", drv: txboxpgx.New(pool)}
	// A direct pool to set up with (the proxy's 2 s connect timeout is
	// for the cuts) and to count with while the proxied one is cut.
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	testenv.Must(t, err, "parse")
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 2
	directPool, err := pgxpool.NewWithConfig(ctx, cfg)
	testenv.Must(t, err, "direct pool")
	t.Cleanup(func() { testenv.ClosePool(t, directPool) })
	direct := db[pgx.Tx]{name: "pgx", drv: txboxpgx.New(directPool)}
	direct.migrateAll(t, "b_outbox")
	direct.exec(t, "CREATE TABLE applied (id text NOT NULL)")

	b := natsBroker(t, testenv.NATS(t), 5*time.Second)
	obB, err := txbox.New(d.drv, txbox.Config{Table: "b_outbox"})
	testenv.Must(t, err, "outbox")
	c, log := loggedConsumer(t, d, b, 2)
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "ship", Binding: b.binding("orders")},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			if _, err := tx.Exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond) // widen the window in which a cut hits a transaction
			if _, err := obB.Add(ctx, tx, txbox.Message{ID: "ship-" + msg.ID, Topic: "shipments", Payload: msg.Payload}); err != nil {
				return fmt.Errorf("ship %s: %w", msg.ID, err)
			}
			return nil
		}), "register")
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	const n = 800
	stop := make(chan struct{})
	var cuts atomic.Int64
	// rowsNow counts the applied rows from the flapping goroutine (which
	// must not fail the test): -1 on an error.
	rowsNow := func() int64 {
		var k int64
		if err := directPool.QueryRow(ctx, "SELECT count(*) FROM applied").Scan(&k); err != nil {
			return -1
		}
		return k
	}
	var flapping sync.WaitGroup
	flapping.Add(1)
	go func() {
		defer flapping.Done()
		for {
			// Up for 400 ms, and until the consumer applied something
			// since the last cut: on a loaded machine a transaction can
			// outlast 400 ms, and a flow cut before it commits anything
			// would never end.
			from := rowsNow()
			select {
			case <-stop:
				return
			case <-time.After(400 * time.Millisecond):
			}
			for rowsNow() == from {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			proxy.Cut()
			cuts.Add(1)
			time.Sleep(300 * time.Millisecond)
			proxy.Resume()
		}
	}()
	publishAll(t, b, ids("o", n))
	// Batches that a cut hits are undone whole and retried: under load the
	// flow is slow, so the wait is bounded by progress (a new effect within
	// a minute, the database being cut only 300 ms of every 700), not by
	// a total time.
	progressing(t, time.Minute, "every message applied", func() (int64, bool, string) {
		applied := direct.count(t, "SELECT count(DISTINCT id) FROM applied")
		return applied, applied == n && cuts.Load() >= 3, fmt.Sprintf("%d of %d messages applied, %d cuts; consumer stats %+v; log tail:\n%s",
			applied, n, cuts.Load(), c.Stats(), tail(log.String(), 40))
	})
	close(stop)
	flapping.Wait()
	progressing(t, time.Minute, "every message settled", func() (int64, bool, string) {
		st := c.Stats()
		return st.Handled + st.Duplicates, st.Handled+st.Duplicates >= n, fmt.Sprintf("stats %+v", st)
	})

	st := c.Stats()
	t.Logf("%d cuts; stats %+v", cuts.Load(), st)
	if rows := direct.count(t, "SELECT count(*) FROM applied"); rows != n {
		t.Fatalf("%d rows for %d messages: applied twice", rows, n)
	}
	if rows := direct.count(t, "SELECT count(DISTINCT id) FROM b_outbox"); rows != n {
		t.Fatalf("%d outbox messages added for %d messages", rows, n)
	}
	if rows := direct.count(t, "SELECT count(*) FROM b_outbox"); rows != n {
		t.Fatalf("%d outbox rows for %d messages: added twice", rows, n)
	}
	if dl := b.deadLetters(t, "orders"); len(dl) != 0 || st.DeadLettered != 0 {
		t.Fatalf("dead-lettered %d (stats %d) because the database was cut: %v", len(dl), st.DeadLettered, dl)
	}
	if st.DatabaseFailures == 0 {
		t.Fatalf("no database failure seen in %d cuts: the test did not cut a transaction", cuts.Load())
	}
	if st.Retried != st.DatabaseFailures {
		t.Fatalf("%d retries but %d database failures: some database failures counted as the message's (log:\n%s)",
			st.Retried, st.DatabaseFailures, grepLog(log, "handler failed"))
	}
	if got := logCount(log, dbFailedLog); int64(got) != st.DatabaseFailures {
		t.Fatalf("%d database failures logged %d times, want once each", st.DatabaseFailures, got)
	}
	if got := logCount(log, "inbox.handle_failed"); got != 0 {
		t.Fatalf("the inbox logged %d failures the consumer logs too", got)
	}
}

func grepLog(log *testenv.Buffer, sub string) string {
	var out []string
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	if len(out) > 20 {
		out = out[:20]
	}
	return strings.Join(out, "\n")
}

// With MaxDeliveries 1 (a message-caused failure dead-letters at once), a
// handler whose own connection is terminated (pg_terminate_backend, SQLSTATE
// 57P01) and which then returns Outbox.Add's error wrapped in its own, and
// one that returns a server shutdown wrapped with %w twice, are retried
// until they succeed: nothing dead-lettered, each failure a database
// failure logged once. One that returns a deadlock wrapped twice runs
// again at once (Stats.Conflicts), neither retried nor logged.
func TestHandlerDatabaseErrorRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := pgxDB(t, 10)
	d.migrateAll(t, "b_outbox")
	d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
	b := natsBroker(t, testenv.NATS(t), 5*time.Second)
	obB, err := txbox.New(d.drv, txbox.Config{Table: "b_outbox"})
	testenv.Must(t, err, "outbox")
	c, log := loggedConsumer(t, d, b, 1)
	var mu sync.Mutex
	runs := map[string]int{}
	var addErrs []string
	// Unbatched: the exact accounting below (each failure is its own
	// message's) holds per message transaction; in a batch a terminated
	// connection fails the whole batch and its neighbours run again
	// (TestBatchConnectionKilled).
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "ship", Binding: b.binding("orders"), Batch: consumer.BatchConfig{Size: 1}},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			mu.Lock()
			runs[msg.ID]++
			run := runs[msg.ID]
			mu.Unlock()
			switch {
			case strings.HasPrefix(msg.ID, "kill") && run == 1:
				_, _ = tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
				_, err := obB.Add(ctx, tx, txbox.Message{ID: "ship-" + msg.ID, Topic: "shipments", Payload: msg.Payload})
				if err == nil {
					return consumer.Permanent(errors.New("Outbox.Add succeeded on a terminated connection"))
				}
				mu.Lock()
				addErrs = append(addErrs, err.Error())
				mu.Unlock()
				return fmt.Errorf("ship %s: %w", msg.ID, err)
			case strings.HasPrefix(msg.ID, "wrap") && run <= 2:
				return fmt.Errorf("charge %s: %w", msg.ID, fmt.Errorf("reserve stock: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}))
			case strings.HasPrefix(msg.ID, "deadlock") && run <= 2:
				return fmt.Errorf("charge %s: %w", msg.ID, fmt.Errorf("reserve stock: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}))
			}
			if _, err := tx.Exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID); err != nil {
				return err
			}
			return testenv.Err(obB.Add(ctx, tx, txbox.Message{ID: "ship-" + msg.ID, Topic: "shipments", Payload: msg.Payload}))
		}), "register")
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	all := append(append(ids("kill", 5), ids("wrap", 5)...), ids("deadlock", 5)...)
	publishAll(t, b, all)
	eventually(t, "every message handled", func() bool { return c.Stats().Handled == int64(len(all)) })
	st := c.Stats()
	t.Logf("stats %+v; Outbox.Add on the terminated connection: %q", st, addErrs)
	if rows := d.count(t, "SELECT count(*) FROM applied"); rows != int64(len(all)) {
		t.Fatalf("%d rows for %d messages", rows, len(all))
	}
	if st.DeadLettered != 0 || len(b.deadLetters(t, "orders")) != 0 {
		t.Fatalf("dead-lettered on a database failure: %+v", st)
	}
	if want := int64(5*1 + 5*2); st.DatabaseFailures != want || st.Retried != want || st.Conflicts != 5*2 {
		t.Fatalf("stats %+v: want %d database failures, all retried, and 10 conflicts run again at once", st, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range all {
		failures := runs[id] - 1
		if strings.HasPrefix(id, "deadlock") {
			failures = 0 // run again at once, neither retried nor logged
		}
		if got := logCount(log, "message_id="+id+" "); got != failures {
			t.Errorf("%s failed %d times, logged %d times:\n%s", id, failures, got, grepLog(log, "message_id="+id+" "))
		}
		if got := logCount(log, "message_id="+id+" ", dbFailedLog); got != failures {
			t.Errorf("%s: %d of %d failures logged as database failures", id, got, failures)
		}
	}
}

// A genuine handler error still dead-letters after MaxDeliveries (2)
// failures of the message's own, however many database failures come
// between: the inbox handler's poison message fails twice with a database
// error (not counted), then twice with its own (dead-lettered, with the
// broker's delivery count 4); the at-least-once handler's bad message is
// dead-lettered on its second delivery.
func TestHandlerErrorStillDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := pgxDB(t, 10)
	d.migrateAll(t)
	d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
	b := natsBroker(t, testenv.NATS(t), 5*time.Second)
	c, log := loggedConsumer(t, d, b, 2)
	var poisonRuns, badRuns atomic.Int64
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "ship", Binding: b.binding("orders")},
		func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			if msg.ID == "poison" {
				if poisonRuns.Add(1) <= 2 {
					return fmt.Errorf("lookup: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"})
				}
				return errors.New("cannot ship poison")
			}
			_, err := tx.Exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID)
			return err
		}), "register inbox")
	testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "notify", Binding: b.binding("shipments")},
		func(ctx context.Context, msg consumer.Message) error {
			if msg.ID == "bad" {
				badRuns.Add(1)
				return errors.New("no such customer")
			}
			return nil
		}), "register at-least-once")
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	publishAll(t, b, append(ids("ok", 10), "poison"))
	for _, err := range b.pub.Publish(ctx, []txbox.Message{{ID: "bad", Topic: b.topic("shipments"), Payload: []byte("bad")}}) {
		testenv.Must(t, err, "publish bad")
	}
	eventually(t, "both failures dead-lettered", func() bool {
		return len(b.deadLetters(t, "orders")) == 1 && len(b.deadLetters(t, "shipments")) == 1
	})
	assertExactlyOnce(t, d, 10)
	poison := b.deadLetters(t, "orders")["poison"]
	if !strings.Contains(poison[b.errHeader], "cannot ship poison") {
		t.Fatalf("poison dead letter lacks its error: %v", poison)
	}
	if poison[b.delHeader] != "4" || poisonRuns.Load() != 4 {
		t.Fatalf("poison dead-lettered after %s deliveries and %d runs, want 4 (2 database failures, 2 of its own)", poison[b.delHeader], poisonRuns.Load())
	}
	bad := b.deadLetters(t, "shipments")["bad"]
	if nd, _ := strconv.Atoi(bad[b.delHeader]); nd != 2 || badRuns.Load() != 2 {
		t.Fatalf("bad dead-lettered after %q deliveries and %d runs, want 2", bad[b.delHeader], badRuns.Load())
	}
	eventually(t, "settled", func() bool { return c.Stats().DeadLettered == 2 })
	if st := c.Stats(); st.DatabaseFailures != 2 || st.Retried != 2+1+1 {
		t.Fatalf("stats %+v: want 2 database failures and 4 retries", st)
	}
	if got := logCount(log, "message_id=poison "); got != 4 {
		t.Fatalf("poison failed 4 times, logged %d times:\n%s", got, grepLog(log, "message_id=poison "))
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// A handler's own network failure — its call to another service refused
// (a real dial of a closed port: ECONNREFUSED, a net.Error) — is the
// message's failure, not the database's: with MaxDeliveries 2 the message
// is dead-lettered after two runs, by an inbox handler batched and
// unbatched (its transaction rolled back fine, so its connection is not
// what failed) and by an at-least-once handler; no database failure is
// counted. A network failure of the handler's own transaction stays the
// database's (TestHandlerDatabaseErrorRetried, TestBatchConnectionKilled).
func TestHandlerNetworkErrorCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := pgxDB(t, 10)
	d.migrateAll(t)
	b := natsBroker(t, testenv.NATS(t), 5*time.Second)
	c, _ := loggedConsumer(t, d, b, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err, "listen")
	closed := ln.Addr().String()
	testenv.Must(t, ln.Close(), "close") // nothing listens there now
	var mu sync.Mutex
	runs := map[string]int{}
	call := func(h, id string) error {
		mu.Lock()
		runs[h+"/"+id]++
		mu.Unlock()
		conn, err := net.DialTimeout("tcp", closed, 5*time.Second)
		if err == nil {
			_ = conn.Close()
			return consumer.Permanent(fmt.Errorf("%s accepted a connection", closed))
		}
		return fmt.Errorf("notify the warehouse: %w", err)
	}
	for flow, size := range map[string]int{"orders": 0, "shipments": 1} {
		testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "inbox-" + flow, Binding: b.binding(flow), Batch: consumer.BatchConfig{Size: size}},
			func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					return err
				}
				return call("inbox-"+flow, msg.ID)
			}), "register inbox %s", flow)
	}
	testenv.Must(t, c.HandleAtLeastOnce(consumer.HandlerConfig{Name: "notify", Binding: b.binding("events")},
		func(ctx context.Context, msg consumer.Message) error { return call("notify", msg.ID) }), "register at-least-once")
	testenv.Must(t, c.Start(ctx), "start")
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	for _, f := range flows {
		var msgs []txbox.Message
		for _, id := range ids("net-"+f, 3) { // one id space: the stream drops a repeated id
			msgs = append(msgs, txbox.Message{ID: id, Topic: b.topic(f), Payload: []byte(id)})
		}
		for _, err := range b.pub.Publish(ctx, msgs) {
			testenv.Must(t, err, "publish")
		}
	}
	const want = 3 * 3
	progressing(t, 30*time.Second, "every message dead-lettered", func() (int64, bool, string) {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for k, n := range runs {
			total += n
			if n > 2 {
				t.Fatalf("%s ran %d times with MaxDeliveries 2: its network failure was not counted (stats %+v)", k, n, c.Stats())
			}
		}
		st := c.Stats()
		return int64(total) + st.DeadLettered, st.DeadLettered == want, fmt.Sprintf("runs %v, stats %+v", runs, st)
	})
	if st := c.Stats(); st.DatabaseFailures != 0 {
		t.Fatalf("stats %+v: a handler's network failure counted as the database's", st)
	}
	for _, f := range flows {
		if n := len(b.deadLetters(t, f)); n != 3 {
			t.Errorf("%s: %d dead letters, want 3", f, n)
		}
	}
}
