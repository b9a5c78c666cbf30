package outboxsql_test

import (
	"context"
	"strings"
	"testing"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
)

// FinishClaim marks a batch and claims the next one in one round trip: the
// claim sees the marks (it takes the rows behind the marked heads); a mark
// that fails commits nothing and runs no claim; a claim that fails after
// the marks committed leaves them committed and says so apart. Every case
// gives its connection back (testenv checks at the end).
func TestFinishClaim(t *testing.T) {
	t.Parallel()
	pool, drv, store := pgClaims(t, 4)
	ctx := context.Background()
	var rows []outboxsql.Row
	for _, id := range []string{"a1", "b1", "a2", "b2", "a3", "b3"} {
		rows = append(rows, outboxsql.Row{ID: id, Topic: "t", Key: id[:1], Payload: []byte(id), Headers: "{}"})
	}
	testenv.Must(t, outboxsql.NewInserter(driver.Postgres, `"txbox_outbox"`).Insert(ctx, drv.Pool(), rows), "insert")
	ids := func(b *outboxsql.Batch) string {
		var out []string
		for _, r := range b.Rows {
			out = append(out, r.ID)
		}
		return strings.Join(out, " ")
	}
	seqs := func(b *outboxsql.Batch) []int64 {
		var out []int64
		for _, r := range b.Rows {
			out = append(out, r.Seq)
		}
		return out
	}
	published := func() string {
		var s string
		testenv.Must(t, pool.QueryRow(ctx, "SELECT coalesce(string_agg(message_id, ' ' ORDER BY id), '') FROM txbox_outbox WHERE published_at IS NOT NULL").Scan(&s), "read marks")
		return s
	}
	claim := func() *outboxsql.Batch {
		t.Helper()
		b, err := store.Claim(ctx, 100, 0)
		testenv.Must(t, err, "claim")
		return b
	}
	// expect checks, when (after what), the rows marked and what a claim
	// takes, and returns that claim.
	expect := func(when, marked, claimed string) *outboxsql.Batch {
		t.Helper()
		if got := published(); got != marked {
			t.Fatalf("%s: marked %q, want %q", when, got, marked)
		}
		b := claim()
		if got := ids(b); got != claimed {
			t.Fatalf("%s: a claim took %q, want %q", when, got, claimed)
		}
		return b
	}

	first := claim()
	if got := ids(first); got != "a1 b1" {
		t.Fatalf("the first claim took %q, want the heads a1 b1", got)
	}
	if !first.CanChain() {
		t.Fatal("a pgx claim cannot chain")
	}
	next, claimErr, err := first.FinishClaim(ctx, seqs(first), outboxsql.ClaimArgs{Limit: 100, Floors: &outboxsql.Floors{}})
	testenv.Must(t, err, "finish")
	testenv.Must(t, claimErr, "the chained claim")
	if got := published(); got != "a1 b1" {
		t.Fatalf("marked %q, want a1 b1", got)
	}
	if got := ids(next); got != "a2 b2 a3 b3" {
		t.Fatalf("the chained claim took %q, want the rows behind the marked heads: a2 b2 a3 b3", got)
	}
	if other := claim(); len(other.Rows) != 0 {
		t.Fatalf("another claim took %q beside the chained one", ids(other))
	} else {
		testenv.Must(t, other.Release(ctx), "release")
	}
	testenv.Must(t, next.Release(ctx), "release the chained claim")

	// A mark that fails: nothing committed, no claim run.
	_, err = pool.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.message_id = 'a2' AND NEW.published_at IS NOT NULL THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse BEFORE UPDATE ON txbox_outbox FOR EACH ROW EXECUTE FUNCTION refuse()`)
	testenv.Must(t, err, "trigger")
	heads := claim()
	if got := ids(heads); got != "a2 b2" {
		t.Fatalf("claimed %q, want a2 b2", got)
	}
	next, claimErr, err = heads.FinishClaim(ctx, seqs(heads), outboxsql.ClaimArgs{Limit: 100, Floors: &outboxsql.Floors{}})
	if err == nil || !strings.Contains(err.Error(), "refused") || next != nil || claimErr != nil {
		t.Fatalf("a refused mark: next %v, claim error %v, error %v; want the mark's error alone", next, claimErr, err)
	}
	again := expect("after a refused mark", "a1 b1", "a2 b2")
	testenv.Must(t, again.Release(ctx), "release")
	_, err = pool.Exec(ctx, "DROP TRIGGER refuse ON txbox_outbox")
	testenv.Must(t, err, "drop trigger")
	again = claim()

	// A claim that fails once the marks committed (a negative LIMIT).
	next, claimErr, err = again.FinishClaim(ctx, seqs(again), outboxsql.ClaimArgs{Limit: -1})
	testenv.Must(t, err, "finish")
	if claimErr == nil || next != nil {
		t.Fatalf("a failing chained claim: next %v, claim error %v", next, claimErr)
	}
	last := expect("after a failed chained claim", "a1 b1 a2 b2", "a3 b3")
	testenv.Must(t, last.Release(ctx), "release")
}
