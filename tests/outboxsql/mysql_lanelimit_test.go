package outboxsql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
)

// On MySQL / MariaDB a lane claim reads as many candidates as the batch
// plus the rows the relay has in flight, and locks only the batch: the
// candidates past it stay free for the claim beside it. Here the row in
// flight (a keyed one, claimed first) is not among the second claim's
// candidates (that claim holds no lane), so its candidates are one row
// longer than its batch.
func TestMySQLLaneClaimLocksOnlyItsBatch(t *testing.T) {
	t.Parallel()
	db := laneDBs(t)["mysql"](t)
	ctx := context.Background()
	rows := []outboxsql.Row{{ID: "keyed", Topic: "t", Key: "k", Payload: []byte("x"), Headers: "{}"}}
	for i := range 10 {
		rows = append(rows, outboxsql.Row{ID: fmt.Sprintf("m%02d", i), Topic: "t", Payload: []byte("x"), Headers: "{}"})
	}
	testenv.Must(t, outboxsql.NewInserter(db.dialect, db.table).Insert(ctx, db.pool, rows), "insert")
	store, err := outboxsql.NewStore(db.dialect, db.pool, db.table, time.Minute)
	testenv.Must(t, err, "store")
	lanes, err := outboxsql.NewLanes(store, db.table, "relay-limit")
	testenv.Must(t, err, "lanes")
	leases, err := lanes.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire")
	first, err := lanes.Claim(ctx, 1, leases)
	testenv.Must(t, err, "first claim")
	defer first.Release(ctx)
	if len(first.Rows) != 1 || first.Rows[0].ID != "keyed" {
		t.Fatalf("first claim took %v, want the keyed row", first.Rows)
	}
	second, err := lanes.Claim(ctx, 3, nil)
	testenv.Must(t, err, "second claim")
	defer second.Release(ctx)
	if len(second.Rows) != 3 {
		t.Fatalf("second claim took %d rows, want 3", len(second.Rows))
	}
	// Another transaction finds the row after the second batch free.
	tx, err := db.pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer tx.Rollback(ctx)
	r, err := tx.Query(ctx, "SELECT message_id FROM txbox_outbox WHERE ordering_key IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")
	testenv.Must(t, err, "lock the next row")
	defer r.Close()
	var next string
	if r.Next() {
		testenv.Must(t, r.Scan(&next), "scan")
	}
	testenv.Must(t, r.Err(), "rows")
	if want := "m03"; next != want {
		t.Fatalf("the first unkeyed row no claim holds is %q, want %q: the second claim locked rows past its batch", next, want)
	}
}
