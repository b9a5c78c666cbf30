package metrics_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relayseam"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxsql"
)

// The backlog sample reads the same figures on every dialect: the disjoint
// states (pending, retrying, parked, dead) and an oldest claimable age that
// skips the rows waiting out a retry and the parked ones.
func TestSampleEachDialect(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		open        func(t *testing.T) *sql.DB
		d           txboxdriver.Dialect
		now, future string
	}{
		{"postgres", func(t *testing.T) *sql.DB { db, _ := testenv.PostgresDB(t, 4); return db }, txboxdriver.Postgres, "now()", "now() + interval '1 hour'"},
		{"sqlite", func(t *testing.T) *sql.DB { return testenv.SQLite(t) }, txboxdriver.SQLite, "1", "9000000000000000"},
		{"mysql", func(t *testing.T) *sql.DB { return testenv.MySQL(t) }, txboxdriver.MySQL, "UTC_TIMESTAMP(6)", "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := c.open(t)
			drv := migrated(t, db, c.d)
			ob, err := txbox.New(drv, txbox.Config{})
			testenv.Must(t, err, "txbox.New")
			r, err := relay.New[*sql.Tx](drv, &ackAll{}, relay.Config{})
			testenv.Must(t, err, "relay.New")
			empty := relayseam.Sample(ctx, r).(txbox.RelaySample)
			if empty.Err != nil || empty.Pending+empty.Retrying+empty.Parked+empty.Dead != 0 || empty.OldestClaimableAge != 0 {
				t.Fatalf("empty table: %+v", empty)
			}

			_, err = ob.AddNoTx(ctx,
				txbox.Message{ID: "p1", Topic: "t", Payload: []byte("1")},
				txbox.Message{ID: "p2", Topic: "t", Payload: []byte("2")},
				txbox.Message{ID: "k1", Topic: "t", Key: "k", Payload: []byte("3")},
				txbox.Message{ID: "k2", Topic: "t", Key: "k", Payload: []byte("4")},
				txbox.Message{ID: "r1", Topic: "t", Payload: []byte("5")},
				txbox.Message{ID: "d1", Topic: "t", Payload: []byte("6")})
			testenv.Must(t, err, "add")
			exec := func(q string) {
				_, err := db.ExecContext(ctx, q)
				testenv.Must(t, err, "exec %s", q)
			}
			exec("UPDATE txbox_outbox SET dead_at = " + c.now + ", attempts = 10 WHERE message_id IN ('k1', 'd1')")
			exec("UPDATE txbox_outbox SET attempts = 1, next_attempt_at = " + c.future + " WHERE message_id = 'r1'")
			time.Sleep(20 * time.Millisecond)
			s := relayseam.Sample(ctx, r).(txbox.RelaySample)
			if s.Err != nil {
				t.Fatal(s.Err)
			}
			if s.Pending != 2 || s.Retrying != 1 || s.Parked != 1 || s.Dead != 2 {
				t.Fatalf("sample %+v, want pending 2, retrying 1, parked 1, dead 2", s)
			}
			if s.OldestClaimableAge <= 0 || s.OldestClaimableAge > time.Minute {
				t.Fatalf("oldest claimable age %s", s.OldestClaimableAge)
			}
			// Only the retrying and parked rows left: nothing is claimable.
			exec("DELETE FROM txbox_outbox WHERE message_id IN ('p1', 'p2')")
			if s := relayseam.Sample(ctx, r).(txbox.RelaySample); s.OldestClaimableAge != 0 || s.Pending != 0 {
				t.Fatalf("with nothing claimable: %+v", s)
			}
		})
	}
}

// On PostgreSQL each sample also reads the table's dead row versions and
// how long the database's oldest open transaction has been open: here one
// left open by another session, which the age covers. Elsewhere the
// sample has no upkeep figures.
func TestSampleUpkeep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		d    txboxdriver.Dialect
		open func(t *testing.T) *sql.DB
	}{
		{txboxdriver.Postgres, func(t *testing.T) *sql.DB { db, _ := testenv.PostgresDB(t, 4); return db }},
		{txboxdriver.SQLite, func(t *testing.T) *sql.DB { return testenv.SQLite(t) }},
		{txboxdriver.MySQL, func(t *testing.T) *sql.DB { return testenv.MySQL(t) }},
	} {
		t.Run(string(c.d), func(t *testing.T) {
			t.Parallel()
			db := c.open(t)
			drv := migrated(t, db, c.d)
			r, err := relay.New[*sql.Tx](drv, &ackAll{}, relay.Config{})
			testenv.Must(t, err, "relay.New")
			if c.d != txboxdriver.Postgres {
				if s := relayseam.Sample(ctx, r).(txbox.RelaySample); s.Upkeep || s.Err != nil {
					t.Fatalf("sample on %s: %+v, want no upkeep figures", c.d, s)
				}
				return
			}
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			testenv.Must(t, err, "begin")
			defer tx.Rollback()
			var one int
			testenv.Must(t, tx.QueryRow("SELECT 1").Scan(&one), "snapshot")
			begun := time.Now() // the transaction began before this
			time.Sleep(100 * time.Millisecond)
			open := time.Since(begun)
			s := relayseam.Sample(ctx, r).(txbox.RelaySample)
			if s.Err != nil || !s.Upkeep || s.DeadRows < 0 {
				t.Fatalf("sample: %+v, want upkeep figures", s)
			}
			if s.OldestTransactionAge < open {
				t.Fatalf("oldest transaction age %s, but one has been open for %s", s.OldestTransactionAge, open)
			}
		})
	}
}

// migrated returns a driver on db whose outbox table is migrated.
func migrated(t *testing.T, db *sql.DB, d txboxdriver.Dialect) *txboxsql.Driver {
	t.Helper()
	drv := txboxsql.New(db, d)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
	return drv
}
