package drivertest_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// MySQL's affected-rows count depends on CLIENT_FOUND_ROWS (go-sql-driver's
// clientFoundRows): these tests pin down the quirks the inbox's receipt must
// not be fooled by, under both settings.

func mysqlInbox(t *testing.T, foundRows bool) (*sql.DB, *txboxsql.Driver) {
	t.Helper()
	var extra []string
	if foundRows {
		extra = append(extra, "clientFoundRows=true")
	}
	db := testenv.MySQL(t, extra...)
	drv := txboxsql.New(db, txboxdriver.MySQL)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{NoOutbox: true, InboxTables: []string{"inbox"}})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
	return db, drv
}

func bothFoundRows(t *testing.T, test func(t *testing.T, foundRows bool)) {
	for _, fr := range []bool{false, true} {
		name := "clientFoundRows=false"
		if fr {
			name = "clientFoundRows=true"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, fr)
		})
	}
}

func affected(t *testing.T, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	res, err := db.Exec(q, args...)
	testenv.Must(t, err, "exec %s", q)
	n, err := res.RowsAffected()
	testenv.Must(t, err, "rows affected")
	return n
}

// The quirk itself: a no-op ON DUPLICATE KEY UPDATE reports a duplicate as
// 0 rows, or as 1 — the same as an insert — under clientFoundRows. The
// receipt's UPDATE changes the row, so it reports 1 (fresh) and 2
// (duplicate) under both.
func TestMySQLAffectedRowsQuirk(t *testing.T) {
	t.Parallel()
	bothFoundRows(t, func(t *testing.T, foundRows bool) {
		db, _ := mysqlInbox(t, foundRows)
		naive := "INSERT INTO inbox (source, message_id) VALUES (?, ?) ON DUPLICATE KEY UPDATE source = source"
		if n := affected(t, db, naive, "s", "naive"); n != 1 {
			t.Fatalf("naive insert: %d rows", n)
		}
		dup := affected(t, db, naive, "s", "naive")
		if want := map[bool]int64{false: 0, true: 1}[foundRows]; dup != want {
			t.Fatalf("naive duplicate: %d rows, want %d (the quirk this test documents)", dup, want)
		}
		receipt := "INSERT INTO inbox (source, message_id) VALUES (?, ?) ON DUPLICATE KEY UPDATE duplicates = duplicates + 1"
		if n := affected(t, db, receipt, "s", "m"); n != 1 {
			t.Fatalf("receipt of a fresh message: %d rows, want 1", n)
		}
		for range 2 {
			if n := affected(t, db, receipt, "s", "m"); n != 2 {
				t.Fatalf("receipt of a duplicate: %d rows, want 2", n)
			}
		}
	})
}

// Through the API: fresh, duplicate, duplicate in the same transaction,
// marking processed twice (an UPDATE to the same value reports 0 rows
// without clientFoundRows), and a mark of a message never received.
func TestMySQLInboxUnderBothSettings(t *testing.T) {
	t.Parallel()
	bothFoundRows(t, func(t *testing.T, foundRows bool) {
		ctx := context.Background()
		_, drv := mysqlInbox(t, foundRows)
		ib, err := inbox.New(drv, inbox.Config{Table: "inbox", Hook: func(context.Context, inbox.Event) {}})
		testenv.Must(t, err, "inbox.New")
		runs := 0
		for i, want := range []inbox.Result{inbox.Fresh, inbox.Duplicate, inbox.Duplicate} {
			res, err := ib.Handle(ctx, "s", "m", nil, func(context.Context, *sql.Tx) error { runs++; return nil })
			if err != nil || res != want {
				t.Fatalf("Handle #%d = %v, %v; want %v", i+1, res, err, want)
			}
		}
		if runs != 1 {
			t.Fatalf("handler ran %d times", runs)
		}
		tx, err := drv.DB().Begin()
		testenv.Must(t, err, "begin")
		defer func() { _ = tx.Rollback() }()
		for i, want := range []bool{true, false} {
			fresh, err := ib.RecordReceive(ctx, tx, "s", "low", nil)
			if err != nil || fresh != want {
				t.Fatalf("RecordReceive #%d = %v, %v; want %v", i+1, fresh, err, want)
			}
		}
		for range 3 {
			testenv.Must(t, ib.MarkProcessed(ctx, tx, "s", "low"), "mark processed")
		}
		if err := ib.MarkProcessed(ctx, tx, "s", "never"); !errors.Is(err, inbox.ErrNotReceived) {
			t.Fatalf("MarkProcessed(never) = %v", err)
		}
	})
}

// INSERT IGNORE, the other usual MySQL dedupe, turns a too-long id into a
// warning and truncates it: two ids sharing their first 1024 bytes would
// collide, and the second would be a false duplicate. The receipt fails
// instead, and never calls the handler on a guess.
func TestMySQLTooLongIDIsAnErrorNotADuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, drv := mysqlInbox(t, false)
	long := strings.Repeat("x", 1024)
	if n := affected(t, db, "INSERT IGNORE INTO inbox (source, message_id) VALUES ('s', ?)", long+"a"); n != 1 {
		t.Fatalf("insert ignore: %d", n)
	}
	if n := affected(t, db, "INSERT IGNORE INTO inbox (source, message_id) VALUES ('s', ?)", long+"b"); n != 0 {
		t.Fatalf("INSERT IGNORE reported %d rows for another message: the quirk did not show", n)
	}
	ib, err := inbox.New(drv, inbox.Config{Table: "inbox", MaxIDLen: 2000, Hook: func(context.Context, inbox.Event) {}})
	testenv.Must(t, err, "inbox.New")
	for _, id := range []string{long + "c", long + "d"} {
		res, err := ib.Handle(ctx, "t", id, nil, func(context.Context, *sql.Tx) error { return nil })
		if err == nil || res != inbox.Failed {
			t.Fatalf("Handle of a %d-byte id = %v, %v; want an error", len(id), res, err)
		}
	}
}

// A driver whose Exec does not report affected rows (0) makes the receipt
// an error: the handler neither runs on a guess nor is skipped.
func TestMySQLUnknownAffectedRowsIsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, drv := mysqlInbox(t, false)
	ib, err := inbox.New[*sql.Tx](zeroRows{drv}, inbox.Config{Table: "inbox", Hook: func(context.Context, inbox.Event) {}})
	testenv.Must(t, err, "inbox.New")
	ran := false
	res, err := ib.Handle(ctx, "s", "m", nil, func(context.Context, *sql.Tx) error { ran = true; return nil })
	if err == nil || res != inbox.Failed || ran || !strings.Contains(err.Error(), "rows affected") {
		t.Fatalf("Handle = %v, %v (handler ran: %v); want an error", res, err, ran)
	}
}

// zeroRows is a driver whose Exec reports 0 rows affected, as a driver that
// cannot tell does.
type zeroRows struct{ *txboxsql.Driver }

func (z zeroRows) BeginTx(ctx context.Context) (*sql.Tx, txboxdriver.Tx, error) {
	tx, dtx, err := z.Driver.BeginTx(ctx)
	return tx, zeroTx{dtx}, err
}

type zeroTx struct{ txboxdriver.Tx }

func (z zeroTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	_, err := z.Tx.Exec(ctx, q, args...)
	return 0, err
}
