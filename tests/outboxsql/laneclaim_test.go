package outboxsql_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"
)

// Lanes.Claim against PostgreSQL, by a relay owning every lane: a key's
// rows are taken one after another behind its head, up to the first row of
// the key that is dead (the key is parked) or not due; a lane with a row in
// flight in another batch of the relay yields nothing (d shares c's lane);
// rows without a key
// are taken as they come; the pick stops at the limit, each key's rows
// still a run from its head; and every row names the one it follows.
func TestLaneClaimRules(t *testing.T) {
	t.Parallel()
	pool, drv, store := pgClaims(t, 8)
	ctx := context.Background()
	// a1 a2 a3 [a4 dead] a5 · b1 [b2 not due] b3 · c1 c2 (c1 in flight) · u1 u2 (no key) · d1..d6
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
	testenv.Must(t, outboxsql.NewInserter(txboxdriver.Postgres, `"txbox_outbox"`).Insert(ctx, drv.Pool(), rows), "insert")
	exec := func(sql string) {
		_, err := pool.Exec(ctx, sql)
		testenv.Must(t, err, "%s", sql)
	}
	exec("UPDATE txbox_outbox SET dead_at = now() WHERE message_id = 'a4'")
	exec("UPDATE txbox_outbox SET next_attempt_at = now() + interval '1 hour' WHERE message_id = 'b2'")
	lanes, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-rules")
	testenv.Must(t, err, "lanes")
	leases, err := lanes.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire")
	var laneC, laneD int16
	testenv.Must(t, pool.QueryRow(ctx, "SELECT hashtext('c') & 63, hashtext('d') & 63").Scan(&laneC, &laneD), "lanes of c and d")
	if laneC != laneD {
		t.Fatalf("c and d are in lanes %d and %d; the test needs them in one", laneC, laneD)
	}

	// A batch of this relay holds c1 (a claim of one row from c's lane),
	// and keeps u1, which its statement locked past the limit, until it
	// ends.
	first, err := lanes.Claim(ctx, 1, []outboxsql.Lease{leases[laneC]})
	testenv.Must(t, err, "claim c1")
	defer func() { _ = first.Release(ctx) }()
	if len(first.Rows) != 1 || first.Rows[0].ID != "c1" {
		t.Fatalf("the first claim took %+v, want c1", first.Rows)
	}

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
	claim := func(limit int) string {
		t.Helper()
		b, err := lanes.Claim(ctx, limit, leases)
		testenv.Must(t, err, "claim (limit %d)", limit)
		got := describe(b)
		testenv.Must(t, b.Release(ctx), "release")
		return got
	}
	all := "a1 b1 a2<a1 a3<a2 u2"
	if got := claim(100); got != all {
		t.Fatalf("claimed %q\nwant    %q", got, all)
	}
	// The pick stops at the limit: 4 rows, each key's a run from its head.
	got := claim(4)
	if n := len(strings.Fields(got)); n != 4 {
		t.Fatalf("limit 4 claimed %q", got)
	}
	for _, key := range []string{"a", "b"} {
		var run []string
		for _, f := range strings.Fields(got) {
			if strings.HasPrefix(f, key) {
				run = append(run, f)
			}
		}
		if len(run) > 0 && !isRun(run, strings.Fields(all)) {
			t.Fatalf("limit 4 claimed %q: key %s's rows are not a run from its head", got, key)
		}
	}
	// c1 settled: c's lane flows again, and u1 is free.
	testenv.Must(t, first.Finish(ctx, []int64{first.Rows[0].Seq}, nil, 10), "finish c1")
	if got, want := claim(100), "a1 b1 u1 a2<a1 c2 a3<a2 u2 d1 d2<d1 d3<d2 d4<d3 d5<d4 d6<d5"; got != want {
		t.Fatalf("after c1 claimed %q\nwant          %q", got, want)
	}
	// The plain claim (Store.Claim) takes heads only.
	b, err := store.Claim(ctx, 100, 0)
	testenv.Must(t, err, "claim")
	got = describe(b)
	testenv.Must(t, b.Release(ctx), "release")
	if got != "a1 b1 u1 c2 u2 d1" {
		t.Fatalf("the plain claim took %q", got)
	}
}

// isRun reports whether run is the first rows of its key in want, in order.
func isRun(run, want []string) bool {
	i := 0
	for _, w := range want {
		if i < len(run) && w[:1] == run[0][:1] {
			if w != run[i] {
				return false
			}
			i++
		}
	}
	return i == len(run)
}

// A row of key K that commits late, with an id below rows of its lane
// already claimed and marked, is K's head when K's next row comes: the
// owner reads each lane from its first undelivered row (no cursor), so it
// claims the late row first and the next one behind it, never the next
// one alone.
func TestLaneClaimLateCommitBelowDrainedRows(t *testing.T) {
	t.Parallel()
	pool, drv, store := pgClaims(t, 8)
	ctx := context.Background()
	// Keys of K's lane besides K.
	var others []string
	rows, err := pool.Query(ctx, "SELECT 'o' || g FROM generate_series(1, 5000) g WHERE hashtext('o' || g) & 63 = hashtext('K') & 63 LIMIT 3")
	testenv.Must(t, err, "keys")
	for rows.Next() {
		var k string
		testenv.Must(t, rows.Scan(&k), "scan")
		others = append(others, k)
	}
	testenv.Must(t, rows.Err(), "keys")
	if len(others) < 3 {
		t.Fatalf("found %d keys in K's lane, want 3", len(others))
	}
	ins := outboxsql.NewInserter(txboxdriver.Postgres, `"txbox_outbox"`)
	row := func(id, key string) []outboxsql.Row {
		return []outboxsql.Row{{ID: id, Topic: "t", Key: key, Payload: []byte(id), Headers: "{}"}}
	}
	lanes, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-late")
	testenv.Must(t, err, "lanes")
	leases, err := lanes.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire")

	// K's first row, in a transaction still open.
	late, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = late.Rollback(ctx) }()
	_, err = late.Exec(ctx, "INSERT INTO txbox_outbox (message_id, topic, ordering_key, payload) VALUES ('K1', 't', 'K', 'K1')")
	testenv.Must(t, err, "insert K1")
	// Rows of K's lane committed after it, with larger ids, delivered.
	for _, k := range others {
		testenv.Must(t, ins.Insert(ctx, drv.Pool(), row(k, k)), "insert %s", k)
	}
	b, err := lanes.Claim(ctx, 100, leases)
	testenv.Must(t, err, "claim")
	var seqs []int64
	for _, r := range b.Rows {
		seqs = append(seqs, r.Seq)
	}
	if len(seqs) != len(others) {
		_ = b.Release(ctx)
		t.Fatalf("claimed %d rows, want the %d committed ones", len(seqs), len(others))
	}
	testenv.Must(t, b.Finish(ctx, seqs, nil, 10), "finish")
	// K1 commits; K's next row comes after it.
	testenv.Must(t, late.Commit(ctx), "commit K1")
	testenv.Must(t, ins.Insert(ctx, drv.Pool(), row("K2", "K")), "insert K2")

	b, err = lanes.Claim(ctx, 100, leases)
	testenv.Must(t, err, "claim")
	defer func() { _ = b.Release(ctx) }()
	if len(b.Rows) != 2 || b.Rows[0].ID != "K1" || b.Rows[1].ID != "K2" || b.Rows[1].Prev != b.Rows[0].Seq {
		t.Fatalf("claimed %+v, want K1, then K2 behind it", b.Rows)
	}
}

// Lanes.FromStart: after a claim that came full (a backlog) the next claim
// may read rows without a key from past the last one it took, and reports
// so; once a claim comes back short, FromStart holds, and the next claim
// reads from the table's start: a row without a key that committed late,
// below the rows already claimed, is claimed (what a Wake is owed).
func TestLaneClaimFromStart(t *testing.T) {
	t.Parallel()
	pool, drv, store := pgClaims(t, 8)
	ctx := context.Background()
	ins := outboxsql.NewInserter(txboxdriver.Postgres, `"txbox_outbox"`)
	lanes, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-start")
	testenv.Must(t, err, "lanes")
	leases, err := lanes.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire")
	if !lanes.FromStart() {
		t.Fatal("FromStart before any claim is false")
	}
	late, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = late.Rollback(ctx) }()
	_, err = late.Exec(ctx, "INSERT INTO txbox_outbox (message_id, topic, payload) VALUES ('late', 't', 'late')")
	testenv.Must(t, err, "insert late")
	for i := range 6 {
		id := fmt.Sprint("u", i)
		testenv.Must(t, ins.Insert(ctx, drv.Pool(), []outboxsql.Row{{ID: id, Topic: "t", Payload: []byte(id), Headers: "{}"}}), "insert %s", id)
	}
	claim := func(limit int) []string {
		t.Helper()
		b, err := lanes.Claim(ctx, limit, leases)
		testenv.Must(t, err, "claim")
		var ids []string
		var seqs []int64
		for _, r := range b.Rows {
			ids, seqs = append(ids, r.ID), append(seqs, r.Seq)
		}
		testenv.Must(t, b.Finish(ctx, seqs, nil, 10), "finish")
		return ids
	}
	if got := claim(2); len(got) != 2 {
		t.Fatalf("first claim took %v, want 2 rows", got)
	}
	if lanes.FromStart() {
		t.Fatal("FromStart after a full claim is true")
	}
	testenv.Must(t, late.Commit(ctx), "commit late")
	// The claims of the backlog go on until one comes back short (the
	// late row is taken by one of them if it reads from the start).
	var took []string
	for i := 0; ; i++ {
		if i > 10 {
			t.Fatalf("no claim came back short: %v", took)
		}
		got := claim(2)
		took = append(took, got...)
		if len(got) < 2 {
			break
		}
	}
	if !lanes.FromStart() {
		t.Fatal("FromStart after a short claim is false")
	}
	if !slices.Contains(took, "late") {
		if got := claim(100); !slices.Contains(got, "late") {
			t.Fatalf("the claim from the start took %v, want the late row", got)
		}
	}
	var pending int
	testenv.Must(t, pool.QueryRow(ctx, "SELECT count(*) FROM txbox_outbox WHERE published_at IS NULL").Scan(&pending), "count")
	if pending != 0 {
		t.Fatalf("%d rows pending, want none", pending)
	}
}

// A claim reads due rows only: with 20,000 rows without a key scheduled an
// hour ahead, at lower ids than the due ones (50 never scheduled, 10 whose
// time has come), the first claim takes the due rows, and its statement fetches about the rows it takes from the table,
// not the scheduled ones (the table's idx_tup_fetch and seq_tup_read in
// pg_stat_user_tables, flushed by pg_stat_force_next_flush on the pool's
// one connection). Both claims: lane_claim (leases) and claim_unkeyed (none).
func TestLaneClaimSkipsScheduledRows(t *testing.T) {
	t.Parallel()
	pool, _, store := pgClaims(t, 1)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, sql)
		testenv.Must(t, err, "%s", sql)
	}
	exec("INSERT INTO txbox_outbox (topic, payload, next_attempt_at) SELECT 't', 'later', now() + interval '1 hour' FROM generate_series(1, 20000)")
	exec("INSERT INTO txbox_outbox (message_id, topic, payload) SELECT 'due' || g, 't', 'due' FROM generate_series(1, 50) g")
	exec("INSERT INTO txbox_outbox (message_id, topic, payload, next_attempt_at) SELECT 'came' || g, 't', 'came', now() - interval '1 minute' FROM generate_series(1, 10) g")
	exec("ANALYZE txbox_outbox")
	lanes, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-scheduled")
	testenv.Must(t, err, "lanes")
	leases, err := lanes.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire")
	fetched := func() int64 {
		t.Helper()
		exec("SELECT pg_stat_force_next_flush()")
		var n int64
		testenv.Must(t, pool.QueryRow(ctx, "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) FROM pg_stat_user_tables WHERE relid = 'txbox_outbox'::regclass").Scan(&n), "stats")
		return n
	}
	for _, c := range []struct {
		name   string
		leases []outboxsql.Lease
	}{{"lane_claim", leases}, {"claim_unkeyed", nil}} {
		claimsDueOnly(t, c.name, func() (*outboxsql.Batch, error) { return lanes.Claim(ctx, 100, c.leases) }, fetched, 2000)
	}
}

// Outside a backlog a claim locks and reads only the lanes of its leases
// that have undelivered keyed rows (found in the lock statement's
// snapshot), and reads no lane it did not lock. The claim here takes that
// snapshot while lane Y, which has a row, is held exclusively (a fence in
// progress); meanwhile K1 commits in lane X, which had no row. The claim
// then takes Y's row, not K1: it did not lock X (another relay's fence of
// X would pass) and did not read it. The next claim finds X and takes K1,
// then K2 behind it.
func TestLaneClaimLocksOnlyLanesWithRows(t *testing.T) {
	t.Parallel()
	pool, drv, store := pgClaims(t, 8)
	ctx := context.Background()
	var laneX, laneY int16
	testenv.Must(t, pool.QueryRow(ctx, "SELECT hashtext('K') & 63, hashtext('Y') & 63").Scan(&laneX, &laneY), "lanes of K and Y")
	if laneX == laneY {
		t.Fatalf("K and Y share lane %d; the test needs two", laneX)
	}
	ins := outboxsql.NewInserter(txboxdriver.Postgres, `"txbox_outbox"`)
	row := func(id, key string) []outboxsql.Row {
		return []outboxsql.Row{{ID: id, Topic: "t", Key: key, Payload: []byte(id), Headers: "{}"}}
	}
	testenv.Must(t, ins.Insert(ctx, drv.Pool(), row("Y1", "Y")), "insert Y1")
	lanes, err := outboxsql.NewLanes(store, `"txbox_outbox"`, "relay-active")
	testenv.Must(t, err, "lanes")
	leases, err := lanes.Acquire(ctx, time.Minute, outboxsql.NumLanes)
	testenv.Must(t, err, "acquire")

	// Lane Y held exclusively, as a fence holds it for an instant.
	fence, err := pool.Acquire(ctx)
	testenv.Must(t, err, "connection")
	defer fence.Release()
	_, err = fence.Exec(ctx, "SELECT pg_advisory_lock('txbox_outbox'::regclass::oid::int, $1)", int32(laneY))
	testenv.Must(t, err, "hold lane Y")
	type claimed struct {
		b   *outboxsql.Batch
		err error
	}
	done := make(chan claimed, 1)
	go func() {
		b, err := lanes.Claim(ctx, 100, leases)
		done <- claimed{b, err}
	}()
	// The claim waits for Y's lock, its lanes chosen.
	testenv.Await(t, "the claim waits for lane Y", func() (bool, string) {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = 'txbox_outbox'::regclass::oid AND objid = $1", int32(laneY)).Scan(&n)
		testenv.Must(t, err, "pg_locks")
		return n > 0, fmt.Sprintf("%d waiting", n)
	})
	testenv.Must(t, ins.Insert(ctx, drv.Pool(), row("K1", "K")), "insert K1")
	_, err = fence.Exec(ctx, "SELECT pg_advisory_unlock('txbox_outbox'::regclass::oid::int, $1)", int32(laneY))
	testenv.Must(t, err, "free lane Y")
	c := <-done
	testenv.Must(t, c.err, "claim")
	var got []string
	for _, r := range c.b.Rows {
		got = append(got, r.ID)
	}
	free, err := lanes.Fence(ctx, []int16{laneX, laneY})
	if err != nil {
		_ = c.b.Release(ctx)
		t.Fatalf("fence: %v", err)
	}
	testenv.Must(t, c.b.Finish(ctx, []int64{c.b.Rows[0].Seq}, nil, 10), "finish")
	if !slices.Equal(got, []string{"Y1"}) || !slices.Equal(free, []int16{laneX}) {
		t.Fatalf("the claim took %v with lanes %v free of its locks; want Y1, with X (%d) free and Y (%d) locked", got, free, laneX, laneY)
	}

	testenv.Must(t, ins.Insert(ctx, drv.Pool(), row("K2", "K")), "insert K2")
	b, err := lanes.Claim(ctx, 100, leases)
	testenv.Must(t, err, "claim")
	defer func() { _ = b.Release(ctx) }()
	if len(b.Rows) != 2 || b.Rows[0].ID != "K1" || b.Rows[1].ID != "K2" || b.Rows[1].Prev != b.Rows[0].Seq {
		t.Fatalf("claimed %+v, want K1, then K2 behind it", b.Rows)
	}
}

// In a backlog, two relays claiming rows without a key by turns, each
// holding its batch while the other claims, do not step over each other's
// rows: a relay's next read starts past the rows it took and past as many
// again for the other relay, which took those meanwhile and holds them.
// Relay A's third claim, while B holds its second batch just past A's
// second, fetches about the rows it takes from the table, not B's too
// (the table's idx_tup_fetch in pg_stat_user_tables, flushed by
// pg_stat_force_next_flush on A's one connection; B's statistics stay
// pending while its batch is open).
func TestLaneClaimUnkeyedSkipsOtherRelaysRows(t *testing.T) {
	t.Parallel()
	pool, _, storeA := pgClaims(t, 1)
	ctx := context.Background()
	var schema string
	testenv.Must(t, pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema), "schema")
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	testenv.Must(t, err, "parse config")
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 1
	poolB, err := pgxpool.NewWithConfig(ctx, cfg)
	testenv.Must(t, err, "pool B")
	t.Cleanup(func() { testenv.ClosePool(t, poolB) })
	storeB, err := outboxsql.NewStore(txboxdriver.Postgres, txboxpgx.New(poolB).Pool(), `"txbox_outbox"`, time.Minute)
	testenv.Must(t, err, "store B")
	_, err = pool.Exec(ctx, "INSERT INTO txbox_outbox (message_id, topic, payload) SELECT 'm' || g, 't', 'x' FROM generate_series(1, 1000) g")
	testenv.Must(t, err, "insert")
	a, err := outboxsql.NewLanes(storeA, `"txbox_outbox"`, "relay-a")
	testenv.Must(t, err, "lanes A")
	b, err := outboxsql.NewLanes(storeB, `"txbox_outbox"`, "relay-b")
	testenv.Must(t, err, "lanes B")
	for _, l := range []*outboxsql.Lanes{a, b, a} {
		l.FullScan = time.Hour // no read from the start but the first
		_, err := l.Join(ctx, time.Minute)
		testenv.Must(t, err, "join")
	}
	claim := func(l *outboxsql.Lanes) (*outboxsql.Batch, []int64) {
		t.Helper()
		batch, err := l.Claim(ctx, 100, nil)
		testenv.Must(t, err, "claim")
		var seqs []int64
		for _, r := range batch.Rows {
			seqs = append(seqs, r.Seq)
		}
		if len(seqs) != 100 {
			t.Fatalf("claim took %d rows, want 100", len(seqs))
		}
		return batch, seqs
	}
	finish := func(batch *outboxsql.Batch, seqs []int64) {
		t.Helper()
		testenv.Must(t, batch.Finish(ctx, seqs, nil, 10), "finish")
	}
	fetched := func() int64 {
		t.Helper()
		_, err := pool.Exec(ctx, "SELECT pg_stat_force_next_flush()")
		testenv.Must(t, err, "flush")
		var n int64
		testenv.Must(t, pool.QueryRow(ctx, "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) FROM pg_stat_user_tables WHERE relid = 'txbox_outbox'::regclass").Scan(&n), "stats")
		return n
	}
	a1, s1 := claim(a)
	b1, t1 := claim(b)
	finish(a1, s1)
	a2, s2 := claim(a)
	finish(b1, t1)
	b2, t2 := claim(b) // held while A claims again
	defer func() { _ = b2.Release(ctx) }()
	finish(a2, s2)
	before := fetched()
	a3, s3 := claim(a)
	testenv.Must(t, a3.Release(ctx), "release")
	n := fetched() - before
	if s3[0] <= t2[len(t2)-1] {
		t.Fatalf("A's third claim took rows from %d, want past B's held batch (%d to %d)", s3[0], t2[0], t2[len(t2)-1])
	}
	if n >= 150 {
		t.Fatalf("A's third claim fetched %d rows from the table for its 100: it stepped over the 100 rows B holds", n)
	}
}
