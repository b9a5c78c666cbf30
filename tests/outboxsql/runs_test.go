package outboxsql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
)

// ClaimRuns, statement by statement against PostgreSQL: a key's rows are
// taken one after another behind its head, up to the first row of the key
// that is dead or not due; a key whose head another claim holds yields
// nothing, nor is the row behind it locked; rows without a key are taken
// as they come; the walk passes held rows and stops at the limit; and every
// row names the one it follows.
func TestClaimRunsRules(t *testing.T) {
	t.Parallel()
	pool, drv, store := pgClaims(t, 8)
	ctx := context.Background()
	// a1 a2 a3 [a4 dead] a5 · b1 [b2 not due] b3 · c1 c2 (c1 held by another claim) · u1 u2 (no key) · d1..d6
	var rows []outboxsql.Row
	add := func(id, key string) {
		rows = append(rows, outboxsql.Row{ID: id, Topic: "t", Key: key, Payload: []byte(id), Headers: "{}"})
	}
	for _, id := range []string{"c1", "a1", "b1", "u1", "a2", "b2", "c2", "a3", "a4", "b3", "u2", "a5"} {
		key := id[:1]
		if key == "u" {
			key = ""
		}
		add(id, key)
	}
	for i := 1; i <= 6; i++ {
		add(fmt.Sprintf("d%d", i), "d")
	}
	testenv.Must(t, outboxsql.NewInserter(driver.Postgres, `"txbox_outbox"`).Insert(ctx, drv.Pool(), rows), "insert")
	exec := func(sql string) {
		_, err := pool.Exec(ctx, sql)
		testenv.Must(t, err, "%s", sql)
	}
	exec("UPDATE txbox_outbox SET dead_at = now() WHERE message_id = 'a4'")
	exec("UPDATE txbox_outbox SET next_attempt_at = now() + interval '1 hour' WHERE message_id = 'b2'")

	// Another relay holds c1 (a claim of one row: the oldest).
	other, err := store.Claim(ctx, 1, 0)
	testenv.Must(t, err, "claim c1")
	if len(other.Rows) != 1 || other.Rows[0].ID != "c1" {
		t.Fatalf("the first claim took %+v, want c1", other.Rows)
	}
	defer other.Release(ctx)

	describe := func(b *outboxsql.Batch) string {
		seqs := map[int64]string{}
		var out []string
		for _, r := range b.Rows {
			seqs[r.Seq] = r.ID
			s := r.ID
			if r.Prev != 0 {
				s += "<" + seqs[r.Prev]
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	// runs claims with runs, releases the batch and returns what it took.
	runs := func(limit int, from int64, floors outboxsql.Floors) string {
		t.Helper()
		b, err := store.ClaimRuns(ctx, limit, from, from, floors)
		testenv.Must(t, err, "claim runs (limit %d, from %d, floors %v)", limit, from, floors)
		got := describe(b)
		testenv.Must(t, b.Release(ctx), "release")
		return got
	}
	if got, want := runs(100, 0, outboxsql.Floors{}), "a1 b1 u1 a2<a1 a3<a2 u2 d1 d2<d1 d3<d2 d4<d3 d5<d4 d6<d5"; got != want {
		t.Fatalf("claimed %q\nwant    %q", got, want)
	}
	// The walk passes the held c1 and stops at the limit.
	if got := runs(4, 0, outboxsql.Floors{}); got != "a1 b1 u1 a2<a1" {
		t.Fatalf("limit 4 claimed %q", got)
	}
	// A floor (a delivered row of the key) moves the head probe up, and a
	// dead row above it still parks the key.
	exec("UPDATE txbox_outbox SET published_at = now() WHERE message_id IN ('a1', 'a2')")
	var a2, a3 int64
	testenv.Must(t, pool.QueryRow(ctx, "SELECT id FROM txbox_outbox WHERE message_id = 'a2'").Scan(&a2), "a2")
	testenv.Must(t, pool.QueryRow(ctx, "SELECT id FROM txbox_outbox WHERE message_id = 'a3'").Scan(&a3), "a3")
	floorA2 := outboxsql.Floors{Keys: []string{"a"}, Seqs: []int64{a2}}
	if got, want := runs(100, 0, floorA2), "b1 u1 a3 u2 d1 d2<d1 d3<d2 d4<d3 d5<d4 d6<d5"; got != want {
		t.Fatalf("with a floor claimed %q\nwant               %q", got, want)
	}
	// A floor whose mark a database crash undid (marks commit lazily): a2
	// is pending again and the key's head. A claim whose scan starts above
	// it must not take a3 as the head; one from the start takes a2 first.
	// With a1 undone too, the walk meets a1 below the floor, drops the
	// stale floor and takes the key from a1.
	for _, c := range []struct {
		undone string
		from   int64
		want   string
	}{
		{"'a2'", a3, "u2 d1 d2<d1 d3<d2 d4<d3 d5<d4 d6<d5"},
		{"'a2'", 0, "b1 u1 a2 a3<a2 u2 d1 d2<d1 d3<d2 d4<d3 d5<d4 d6<d5"},
		{"'a1', 'a2'", 0, "a1 b1 u1 a2<a1 a3<a2 u2 d1 d2<d1 d3<d2 d4<d3 d5<d4 d6<d5"},
	} {
		exec("UPDATE txbox_outbox SET published_at = NULL WHERE message_id IN (" + c.undone + ")")
		if got := runs(100, c.from, floorA2); got != c.want {
			t.Fatalf("with the floor a2 and %s pending again, from %d, claimed %q\nwant %q", c.undone, c.from, got, c.want)
		}
	}

	// The plain claim takes heads only.
	b, err := store.Claim(ctx, 100, 0)
	testenv.Must(t, err, "claim")
	got := describe(b)
	testenv.Must(t, b.Release(ctx), "release")
	if got != "a1 b1 u1 u2 d1" {
		t.Fatalf("the plain claim took %q", got)
	}
}

// A claim with runs that meets hundreds of keys (the walk's table of keys
// grows past its first size three times here): it takes the runs of the
// free keys in id order, each row naming the one before it, and nothing of
// a key whose head another transaction holds; and it stops at the limit.
// 700 keys of 3 rows each, the rows of one round of keys after another.
func TestClaimRunsManyKeys(t *testing.T) {
	t.Parallel()
	pool, drv, store := pgClaims(t, 8)
	ctx := context.Background()
	const keys, perKey = 700, 3
	var rows []outboxsql.Row
	for n := 1; n <= perKey; n++ {
		for k := range keys {
			id := fmt.Sprintf("k%d-%d", k, n)
			rows = append(rows, outboxsql.Row{ID: id, Topic: "t", Key: fmt.Sprintf("k%d", k), Payload: []byte(id), Headers: "{}"})
		}
	}
	testenv.Must(t, outboxsql.NewInserter(driver.Postgres, `"txbox_outbox"`).Insert(ctx, drv.Pool(), rows), "insert")
	// Another transaction holds the head of every third key.
	held, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer held.Rollback(ctx)
	_, err = held.Exec(ctx, `SELECT 1 FROM txbox_outbox WHERE message_id ~ '^k[0-9]+-1$' AND substr(ordering_key, 2)::int % 3 = 0 FOR UPDATE`)
	testenv.Must(t, err, "hold every third head")

	for _, limit := range []int{1000, 2000} {
		b, err := store.ClaimRuns(ctx, limit, 0, 0, outboxsql.Floors{})
		testenv.Must(t, err, "claim runs, limit %d", limit)
		// What the claim must take: in id order, every row of a free key.
		var want []string
		for n := 1; n <= perKey && len(want) < limit; n++ {
			for k := range keys {
				if k%3 != 0 && len(want) < limit {
					want = append(want, fmt.Sprintf("k%d-%d", k, n))
				}
			}
		}
		seqs := map[int64]string{}
		var got []string
		for _, r := range b.Rows {
			seqs[r.Seq] = r.ID
			got = append(got, r.ID)
			key, n, _ := strings.Cut(r.ID, "-")
			if wantPrev := fmt.Sprintf("%s-%c", key, n[0]-1); n != "1" && seqs[r.Prev] != wantPrev {
				t.Fatalf("limit %d: %s follows %q (seq %d), want %s", limit, r.ID, seqs[r.Prev], r.Prev, wantPrev)
			} else if n == "1" && r.Prev != 0 {
				t.Fatalf("limit %d: the head %s follows seq %d", limit, r.ID, r.Prev)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("limit %d: claimed %d rows, want %d; first difference at %d", limit, len(got), len(want), firstDifference(got, want))
		}
		testenv.Must(t, b.Release(ctx), "release")
	}
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Migration 009 adds a run claim with a window and keeps the one of 008
// (seven arguments), which relays of the previous release call while a
// rolling upgrade runs.
func TestClaimRunsOfThePreviousReleaseStay(t *testing.T) {
	t.Parallel()
	pool, drv, _ := pgClaims(t, 2)
	ctx := context.Background()
	testenv.Must(t, outboxsql.NewInserter(driver.Postgres, `"txbox_outbox"`).Insert(ctx, drv.Pool(), []outboxsql.Row{
		{ID: "a1", Topic: "t", Key: "a", Payload: []byte("x"), Headers: "{}"},
		{ID: "a2", Topic: "t", Key: "a", Payload: []byte("x"), Headers: "{}"},
	}), "insert")
	var n int
	testenv.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM txbox_outbox_claim_runs(10, 0, NULL, NULL, NULL, NULL, NULL)`).Scan(&n), "the 7-argument run claim")
	if n != 2 {
		t.Fatalf("the run claim of the previous release took %d rows, want 2", n)
	}
}
