package outboxsql_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxsql"
)

// scheduledRows writes 20,000 rows without a key scheduled an hour ahead,
// then 50 due at once and 10 whose time has come: the claims below take
// the 60 without reading the 20,000. at renders a time an offset from now
// in the dialect's SQL.
func scheduledRows(t *testing.T, db *sql.DB, at func(offset string) string) {
	t.Helper()
	insert := func(n int, id, next string) {
		t.Helper()
		for done := 0; done < n; {
			var vals []string
			for ; done < n && len(vals) < 1000; done++ {
				vals = append(vals, fmt.Sprintf("('%s%d', 't', 'p', %s)", id, done, next))
			}
			_, err := db.Exec("INSERT INTO txbox_outbox (message_id, topic, payload, next_attempt_at) VALUES " + strings.Join(vals, ","))
			testenv.Must(t, err, "insert %s", id)
		}
	}
	insert(20000, "later", at("+1 hour"))
	insert(50, "due", "NULL")
	insert(10, "came", at("-1 minute"))
}

// On MySQL and MariaDB a claim reads due rows only: 20,000 rows scheduled
// ahead below 60 due ones are not read (the session's handler reads grow
// by about the 60, not by 20,000), by the lane claim and by Store.Claim.
func TestMySQLClaimSkipsScheduledRows(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	db.SetMaxOpenConns(1) // the claims and the status reads share one session
	drv := txboxsql.New(db, txboxdriver.MySQL)
	ctx := context.Background()
	migrated(t, drv)
	scheduledRows(t, db, func(off string) string {
		return "UTC_TIMESTAMP(6) + INTERVAL " + strings.TrimPrefix(off, "+")
	})
	store, err := outboxsql.NewStore(txboxdriver.MySQL, drv.Pool(), "`txbox_outbox`", time.Minute)
	testenv.Must(t, err, "store")
	lanes, err := outboxsql.NewLanes(store, "`txbox_outbox`", "relay-scheduled")
	testenv.Must(t, err, "lanes")
	leases, err := lanes.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire")
	handlerReads := func() int64 {
		t.Helper()
		rows, err := db.Query("SHOW SESSION STATUS LIKE 'Handler_read%'")
		testenv.Must(t, err, "status")
		defer rows.Close()
		var n int64
		for rows.Next() {
			var name string
			var v int64
			testenv.Must(t, rows.Scan(&name, &v), "scan")
			switch name {
			case "Handler_read_next", "Handler_read_prev", "Handler_read_rnd_next":
				n += v
			}
		}
		testenv.Must(t, rows.Err(), "status")
		return n
	}
	for _, c := range []struct {
		name  string
		claim func() (*outboxsql.Batch, error)
	}{
		{"lanes", func() (*outboxsql.Batch, error) { return lanes.Claim(ctx, 100, leases) }},
		{"no lanes", func() (*outboxsql.Batch, error) { return lanes.Claim(ctx, 100, nil) }},
		{"Store.Claim", func() (*outboxsql.Batch, error) { return store.Claim(ctx, 100, 0) }},
	} {
		claimsDueOnly(t, c.name, c.claim, handlerReads, 5000)
	}
}

// claimsDueOnly runs claim over a table of 60 rows due below 20,000
// scheduled ahead: it takes the 60 due rows, and reads (reads: index or
// table entries, from the server's counters) at most most entries.
func claimsDueOnly(t *testing.T, name string, claim func() (*outboxsql.Batch, error), reads func() int64, most int64) {
	t.Helper()
	before := reads()
	b, err := claim()
	testenv.Must(t, err, "%s", name)
	n := len(b.Rows)
	testenv.Must(t, b.Release(context.Background()), "release")
	read := reads() - before
	if n != 60 {
		t.Errorf("%s: the first claim took %d rows, want the 60 due", name, n)
	}
	if read > most {
		t.Errorf("%s: the claim read %d index or table entries: it read the 20,000 scheduled rows", name, read)
	}
	t.Logf("%s: %d rows claimed, %d entries read", name, n, read)
}

// lastQueryPool remembers the last query run through it.
type lastQueryPool struct {
	txboxdriver.Pool
	sql  string
	args []any
}

func (p *lastQueryPool) Query(ctx context.Context, q string, args ...any) (txboxdriver.Rows, error) {
	p.sql, p.args = q, args
	return p.Pool.Query(ctx, q, args...)
}

// On SQLite a claim reads due rows only: SQLite counts no rows read, so
// the claim's plan is checked: every read of the outbox table is a search
// of the pending index by next_attempt_at (NULL, or up to now), never by id
// alone, which would step over every row scheduled ahead.
func TestSQLiteClaimSkipsScheduledRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, drv := sqliteScheduled(t)
	pool := &lastQueryPool{Pool: drv.Pool()}
	store, err := outboxsql.NewStore(txboxdriver.SQLite, pool, `"txbox_outbox"`, time.Minute)
	testenv.Must(t, err, "store")
	b, err := store.Claim(ctx, 100, 0)
	testenv.Must(t, err, "claim")
	if len(b.Rows) != 60 {
		t.Errorf("the first claim took %d rows, want the 60 due", len(b.Rows))
	}
	testenv.Must(t, b.Release(ctx), "release")

	var plan []string
	sorts := map[int]bool{} // the nodes that sort their rows
	var readsIn []int       // the parent of each read of the outbox
	outbox := regexp.MustCompile(`^(SCAN|SEARCH) o\b`)
	due := regexp.MustCompile(`USING INDEX txbox_outbox_pending_idx \(next_attempt_at[=<]`)
	for _, n := range sqlitePlan(t, db, pool.sql, pool.args...) {
		plan = append(plan, n.detail)
		if n.detail == "USE TEMP B-TREE FOR ORDER BY" {
			sorts[n.parent] = true
		}
		if outbox.MatchString(n.detail) {
			readsIn = append(readsIn, n.parent)
			if !due.MatchString(n.detail) {
				t.Errorf("the claim reads the outbox by %q: not by due time", n.detail)
			}
		}
	}
	reads := len(readsIn)
	// A read in id order that is then sorted reads every row due at once
	// before the limit applies.
	for _, p := range readsIn {
		if sorts[p] {
			t.Errorf("the claim sorts the rows of a read of the outbox: it reads them all before its limit")
		}
	}
	if reads == 0 {
		t.Errorf("no read of the outbox table in the claim's plan:\n%s", strings.Join(plan, "\n"))
	}
	t.Logf("plan:\n%s", strings.Join(plan, "\n"))
}

// sqliteScheduled returns a migrated SQLite outbox holding scheduledRows.
func sqliteScheduled(t *testing.T) (*sql.DB, *txboxsql.Driver) {
	t.Helper()
	db := testenv.SQLite(t)
	drv := txboxsql.New(db, txboxdriver.SQLite)
	migrated(t, drv)
	scheduledRows(t, db, func(off string) string {
		return "CAST((julianday('now', '" + off + "') - 2440587.5) * 86400000000 AS INTEGER)"
	})
	return db, drv
}

// planNode is a row of SQLite's EXPLAIN QUERY PLAN: the node's parent and
// what it does.
type planNode struct {
	parent int
	detail string
}

// sqlitePlan returns the plan SQLite makes for q.
func sqlitePlan(t *testing.T, db *sql.DB, q string, args ...any) []planNode {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
	testenv.Must(t, err, "explain %s", q)
	defer rows.Close()
	var plan []planNode
	for rows.Next() {
		var id, unused int
		var n planNode
		testenv.Must(t, rows.Scan(&id, &n.parent, &unused, &n.detail), "scan")
		plan = append(plan, n)
	}
	testenv.Must(t, rows.Err(), "plan")
	return plan
}

// execPool remembers every statement executed through it or through
// a transaction it began.
type execPool struct {
	txboxdriver.Pool
	execs []recorded
}

type recorded struct {
	sql  string
	args []any
}

func (p *execPool) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	p.execs = append(p.execs, recorded{q, args})
	return p.Pool.Exec(ctx, q, args...)
}

func (p *execPool) Begin(ctx context.Context) (txboxdriver.Tx, error) {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &execTx{Tx: tx, p: p}, nil
}

type execTx struct {
	txboxdriver.Tx
	p *execPool
}

func (t *execTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	t.p.execs = append(t.p.execs, recorded{q, args})
	return t.Tx.Exec(ctx, q, args...)
}

// On SQLite the statements that end a lease (the marks, a rejection, the
// release of the rows a batch did not mark, an empty batch's end) read the
// batch's rows by id, never the whole table: with 20,000 rows scheduled
// ahead (or published rows kept), a scan of the table per batch would
// bind the drain. The plan of each statement Finish and Release run is
// checked, and the leases they end are gone.
func TestSQLiteLeaseEndsReadTheirRowsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, drv := sqliteScheduled(t)
	pool := &execPool{Pool: drv.Pool()}
	for _, del := range []bool{false, true} {
		store, err := outboxsql.NewStore(txboxdriver.SQLite, pool, `"txbox_outbox"`, time.Minute)
		testenv.Must(t, err, "store")
		if del {
			store.DeletePublished()
		}
		b, err := store.Claim(ctx, 30, 0)
		testenv.Must(t, err, "claim")
		if len(b.Rows) != 30 {
			t.Fatalf("the claim took %d rows, want 30", len(b.Rows))
		}
		// 10 published, 1 rejected, the other 19 released.
		var published []int64
		for _, r := range b.Rows[:10] {
			published = append(published, r.Seq)
		}
		testenv.Must(t, b.Finish(ctx, published, []outboxsql.Rejection{{Seq: b.Rows[10].Seq, Err: "no", RetryAfter: time.Hour}}, 5), "finish")
		// A batch released whole.
		b, err = store.Claim(ctx, 5, 0)
		testenv.Must(t, err, "claim")
		if len(b.Rows) == 0 {
			t.Fatalf("the second claim took no row")
		}
		testenv.Must(t, b.Release(ctx), "release")
	}
	// An empty batch (every due row published or leased away).
	_, err := db.Exec("UPDATE txbox_outbox SET published_at = 1 WHERE message_id NOT LIKE 'later%'")
	testenv.Must(t, err, "publish the due rows")
	store, err := outboxsql.NewStore(txboxdriver.SQLite, pool, `"txbox_outbox"`, time.Minute)
	testenv.Must(t, err, "store")
	b, err := store.Claim(ctx, 30, 0)
	testenv.Must(t, err, "claim")
	if len(b.Rows) != 0 {
		t.Fatalf("a claim with no due row took %d rows", len(b.Rows))
	}
	testenv.Must(t, b.Release(ctx), "release")
	testenv.Must(t, b.Finish(ctx, nil, nil, 5), "finish")

	var held int
	testenv.Must(t, db.QueryRow("SELECT count(*) FROM txbox_outbox WHERE claim_token IS NOT NULL").Scan(&held), "count leases")
	if held != 0 {
		t.Errorf("%d rows still leased after every batch ended", held)
	}
	scan := regexp.MustCompile(`^SCAN (txbox_outbox|"txbox_outbox")\b`)
	if len(pool.execs) == 0 {
		t.Fatal("no statement recorded")
	}
	for _, e := range pool.execs {
		for _, n := range sqlitePlan(t, db, e.sql, e.args...) {
			if scan.MatchString(n.detail) {
				t.Errorf("%s\nreads the whole table (%s)", e.sql, n.detail)
			}
		}
	}
	t.Logf("%d statements checked", len(pool.execs))
}
