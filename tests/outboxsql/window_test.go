package outboxsql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
)

// A claim on PostgreSQL, plain or with runs, with lanes or without, reads
// a window of 1,000 ids
// (for a batch of 10) from the first pending row at its start and, coming
// back short with pending rows beyond it, says where the next claim goes on
// (Batch.Next: the first of them); claims that go on from there find the
// rest, and a claim that reaches the backlog's end says nothing. Here the
// first windows hold only key a's rows queued behind a head that another
// claim holds: without the window the first claim walked on to the rows
// without a key and took them in the same statement.
func TestClaimStopsAtItsWindow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		runs, lanes bool
	}{{"plain", false, false}, {"runs", true, false}, {"lanes", false, true}, {"lanes runs", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			claimStopsAtItsWindow(t, c.runs, c.lanes)
		})
	}
}

func claimStopsAtItsWindow(t *testing.T, runs, withLanes bool) {
	pool, drv, store := pgClaims(t, 8)
	ctx := context.Background()
	const keyed = 1200 // a1 … a1200, then u1 … u5 without a key
	var rows []outboxsql.Row
	for i := 1; i <= keyed; i++ {
		rows = append(rows, outboxsql.Row{ID: fmt.Sprintf("a%d", i), Topic: "t", Key: "a", Payload: []byte("x"), Headers: "{}"})
	}
	for i := 1; i <= 5; i++ {
		rows = append(rows, outboxsql.Row{ID: fmt.Sprintf("u%d", i), Topic: "t", Payload: []byte("x"), Headers: "{}"})
	}
	// Ids far from 0, as in a table with a history: a claim from 0 reads
	// from the first pending row, not an empty window below it.
	_, err := pool.Exec(ctx, "ALTER TABLE txbox_outbox ALTER COLUMN id RESTART WITH 5000000")
	testenv.Must(t, err, "restart ids")
	testenv.Must(t, outboxsql.NewInserter(driver.Postgres, `"txbox_outbox"`).Insert(ctx, drv.Pool(), rows), "insert")
	// With lanes, this relay owns them all.
	lanes, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-window")
	testenv.Must(t, err, "lanes")
	leases, err := lanes.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire the lanes")
	claim := func(limit int, from, reach int64) (*outboxsql.Batch, error) {
		switch {
		case withLanes && runs:
			return lanes.ClaimRuns(ctx, limit, from, reach, leases, outboxsql.Floors{})
		case withLanes:
			return lanes.ClaimReaching(ctx, limit, from, reach, leases)
		case runs:
			return store.ClaimRuns(ctx, limit, from, reach, outboxsql.Floors{})
		}
		return store.ClaimReaching(ctx, limit, from, reach)
	}
	firstAt := func(from int64) int64 {
		var id int64
		testenv.Must(t, pool.QueryRow(ctx, "SELECT coalesce(min(id), 0) FROM txbox_outbox WHERE id >= $1", from).Scan(&id), "first id from %d", from)
		return id
	}

	held, err := store.Claim(ctx, 1, 0)
	testenv.Must(t, err, "claim a1")
	if len(held.Rows) != 1 || held.Rows[0].ID != "a1" || held.Next != 0 {
		t.Fatalf("the first claim took %+v (next %d), want a1 alone", held.Rows, held.Next)
	}
	defer held.Release(ctx)

	// Claims from the table's start, each going on from where the last
	// one said, until one says nothing more.
	var took []string
	from, claims := int64(0), 0
	for {
		b, err := claim(10, from, from)
		testenv.Must(t, err, "claim from %d", from)
		claims++
		start := firstAt(from)
		for _, r := range b.Rows {
			if r.Seq >= start+1000 {
				t.Fatalf("claim from %d took %s (id %d), beyond its window", from, r.ID, r.Seq)
			}
			took = append(took, r.ID)
		}
		if claims == 1 && (len(b.Rows) != 0 || b.Next != firstAt(start+1000)) {
			t.Fatalf("claim from the start took %d rows, next %d; want none, next %d (the first row after its window)", len(b.Rows), b.Next, firstAt(start+1000))
		}
		testenv.Must(t, b.Release(ctx), "release")
		if b.Next == 0 {
			break
		}
		if b.Next < start+1000 {
			t.Fatalf("claim from %d says go on from %d, inside its window", from, b.Next)
		}
		from = b.Next
	}
	if fmt.Sprint(took) != "[u1 u2 u3 u4 u5]" {
		t.Fatalf("claims going on from window to window took %v, want u1 … u5", took)
	}
	t.Logf("%d claims", claims)
	// A window reaching past the previous batch's last row (reach): from
	// the start, up to 1,000 ids past reach, where the rows without a key
	// are.
	var u1 int64
	testenv.Must(t, pool.QueryRow(ctx, "SELECT id FROM txbox_outbox WHERE message_id = 'u1'").Scan(&u1), "u1")
	b, err := claim(10, 0, u1-500)
	testenv.Must(t, err, "claim reaching %d", u1-500)
	var got []string
	for _, r := range b.Rows {
		got = append(got, r.ID)
	}
	if fmt.Sprint(got) != "[u1 u2 u3 u4 u5]" || b.Next != 0 {
		t.Fatalf("claim reaching past u1-500 took %v, next %d; want u1 … u5, next 0", got, b.Next)
	}
	testenv.Must(t, b.Release(ctx), "release")
	// A full batch says nothing, however much lies beyond it.
	testenv.Must(t, held.Release(ctx), "release a1")
	b, err = claim(1, 0, 0)
	testenv.Must(t, err, "claim")
	if len(b.Rows) != 1 || b.Rows[0].ID != "a1" || b.Next != 0 {
		t.Fatalf("a full claim took %+v, next %d; want a1, next 0", b.Rows, b.Next)
	}
	testenv.Must(t, b.Release(ctx), "release")
}
