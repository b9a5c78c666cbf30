package outboxsql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// SQLite's lease columns are dynamically typed: a row written with a
// claim_token and a text or far-future claimed_until would be held out of
// every claim, and with it every later row of its key. The table's
// triggers refuse such leases from writers, and the claim treats one
// written before them (or with the triggers dropped) as expired.
func TestSQLiteImplausibleLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.SQLite(t)
	drv := txboxsql.New(db, txboxdriver.SQLite)
	migrated(t, drv)
	future := time.Now().Add(3 * time.Hour).UnixMicro()
	soon := time.Now().Add(time.Hour).UnixMicro()
	for _, c := range []struct{ token, until string }{
		{"'x'", "'later'"},
		{"'x'", fmt.Sprint(future)},
		{"'x'", "1.5"},
		{"x'00'", "NULL"},
	} {
		_, err := db.Exec(`INSERT INTO txbox_outbox (topic, payload, claim_token, claimed_until) VALUES ('t', 'p', ` + c.token + `, ` + c.until + `)`)
		if err == nil || !strings.Contains(err.Error(), "txbox: claim") {
			t.Errorf("INSERT with claim_token %s, claimed_until %s: %v, want the trigger's refusal", c.token, c.until, err)
		}
	}
	_, err := db.Exec(`INSERT INTO txbox_outbox (topic, payload) VALUES ('t', 'p')`)
	testenv.Must(t, err, "insert")
	for _, set := range []string{"claimed_until = 'later'", fmt.Sprintf("claimed_until = %d", future), "claim_token = x'01'"} {
		if _, err := db.Exec(`UPDATE txbox_outbox SET ` + set); err == nil || !strings.Contains(err.Error(), "txbox: claim") {
			t.Errorf("UPDATE SET %s: %v, want the trigger's refusal", set, err)
		}
	}
	// A lease a relay could hold (an hour ahead) is accepted.
	_, err = db.Exec(`UPDATE txbox_outbox SET claim_token = 'relay', claimed_until = ?`, soon)
	testenv.Must(t, err, "a plausible lease")
	_, err = db.Exec(`DELETE FROM txbox_outbox`)
	testenv.Must(t, err, "delete")

	// Rows written before the triggers: the claim takes them.
	for _, s := range []string{`DROP TRIGGER IF EXISTS "txbox_outbox_lease_insert"`, `DROP TRIGGER IF EXISTS "txbox_outbox_lease_update"`} {
		_, err := db.Exec(s)
		testenv.Must(t, err, "%s", s)
	}
	_, err = db.Exec(fmt.Sprintf(`INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload, claim_token, claimed_until) VALUES
		('text', 't', 'A', 'p', 'x', 'later'), ('a2', 't', 'A', 'p', NULL, NULL),
		('far', 't', 'B', 'p', 'x', %d), ('b2', 't', 'B', 'p', NULL, NULL),
		('held', 't', 'C', 'p', 'x', %d), ('c2', 't', 'C', 'p', NULL, NULL)`, future, soon))
	testenv.Must(t, err, "insert leased rows")
	store, err := outboxsql.NewStore(txboxdriver.SQLite, drv.Pool(), `"txbox_outbox"`, time.Minute)
	testenv.Must(t, err, "NewStore")
	b, err := store.Claim(ctx, 100, 0)
	testenv.Must(t, err, "claim")
	var got []string
	for _, r := range b.Rows {
		got = append(got, r.ID)
	}
	// The rows under an implausible lease are claimed; the one under a
	// lease a relay could hold, and the row of its key behind it, are not.
	if strings.Join(got, " ") != "text far" {
		t.Fatalf("claimed %q, want the rows under an unreadable or far-future lease: text far", got)
	}
	seqs := make([]int64, len(b.Rows))
	for i, r := range b.Rows {
		seqs[i] = r.Seq
	}
	testenv.Must(t, b.Finish(ctx, seqs, nil, 10), "finish")
	b, err = store.Claim(ctx, 100, 0)
	testenv.Must(t, err, "claim")
	got = got[:0]
	for _, r := range b.Rows {
		got = append(got, r.ID)
	}
	if strings.Join(got, " ") != "a2 b2" {
		t.Fatalf("second claim %q, want the keys' next rows a2 b2", got)
	}
	testenv.Must(t, b.Release(ctx), "release")
}
