package outboxsql

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"slices"
	"time"

	"github.com/txbox/txbox/internal/sqltext"
	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/mysql_lanes.sql
var mysqlLanesSQL string

// mysqlLanes is the lane SQL on MySQL and MariaDB (sql/mysql_lanes.sql):
// the fence is a shared row lock on <table>_fences held by each claim
// transaction, since GET_LOCK is session-scoped.
type mysqlLanes struct {
	q struct {
		lock, valid, candidates, claim, join, count, renew, owned, free, take, taken, fence, release, leave string
	}
}

func newMySQLLanes(table string) (*mysqlLanes, error) {
	m := &mysqlLanes{}
	schema, name := unqualify(table)
	funcs := sqltext.Names(txboxdriver.MySQL, schema, name)
	funcs["list"] = listFunc
	err := sqltext.Load("outbox/mysql_lanes", mysqlLanesSQL, funcs, map[string]*string{
		"fence_lock": &m.q.lock, "lane_valid": &m.q.valid, "lane_candidates": &m.q.candidates, "claim_lanes": &m.q.claim,
		"lane_join": &m.q.join, "lane_count": &m.q.count, "lane_renew": &m.q.renew, "lane_owned": &m.q.owned,
		"lane_free": &m.q.free, "lane_take": &m.q.take, "lane_taken": &m.q.taken,
		"lane_fence": &m.q.fence, "lane_release": &m.q.release, "lane_leave": &m.q.leave,
	})
	return m, err
}

// claim reads the candidates without locks; when some have a key, takes
// the shared locks of their lanes' fence rows and reads which of those
// leases still hold, dropping the keyed candidates of the others; then
// locks the candidates by primary key. All in one READ COMMITTED
// transaction, where each statement reads what was committed when it
// began: the lease check sees every takeover whose fence ran before the
// locks, and the locking read checks every condition again. A batch of
// rows without a key runs no lane statement. Integer arguments are
// written into the statements (bindInts).
func (m *mysqlLanes) claim(ctx context.Context, l *Lanes, limit int, from int64, leases []Lease) (*Batch, error) {
	// A relay's claims take turns up to their lock: each reads past the
	// rows of the claims before it (inFlight). Two at once would read the
	// same candidates, and the one that locked them second would come back
	// empty.
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	s := l.s
	start := time.Now()
	tx, err := s.d.beginClaim(context.WithoutCancel(ctx), s.pool, s.lease)
	if err != nil {
		return nil, err
	}
	b := &Batch{s: s, tx: tx, Started: start}
	fail := func(err error) (*Batch, error) {
		_ = b.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	held := make([]any, 0, len(leases))
	for _, ls := range leases {
		held = append(held, ls.Lane)
	}
	if len(held) == 0 {
		held = append(held, int16(-1)) // no lane: rows without a key only
	}
	// The candidates read no locks: past this relay's rows in flight
	// (locked by its other batches), or a claim beside a batch would find
	// only that batch's rows.
	inFlight := int(l.inFlight.Load())
	scan := append(append([]any{from}, held...), limit+inFlight)
	q, args := bindInts(expandList(s.d, m.q.candidates, len(held)), append(append(scan, scan...), limit+inFlight))
	cands, err := m.candidates(ctx, tx, q, args)
	if err != nil {
		return fail(err)
	}
	ids := make([]any, 0, len(cands))
	if valid, err := m.validLanes(ctx, tx, l, cands, leases); err != nil {
		return fail(fmt.Errorf("claim transaction: lane locks: %w", err))
	} else {
		for _, c := range cands {
			if c.lane < 0 || valid[c.lane] {
				ids = append(ids, c.id)
			}
		}
	}
	if len(ids) > 0 {
		q, args := bindInts(expandList(s.d, m.q.claim, len(ids)), append(ids, limit))
		rows, err := tx.Query(ctx, q, args...)
		if err == nil {
			b.Rows, err = s.scanClaimed(rows, limit)
		}
		if err != nil {
			return fail(err)
		}
	}
	n := int64(len(b.Rows))
	l.inFlight.Add(n)
	b.onEnd = func() { l.inFlight.Add(-n) }
	return b, nil
}

// candidate is a row lane_candidates proposes; lane is -1 without a key.
type candidate struct {
	id   int64
	lane int16
}

func (m *mysqlLanes) candidates(ctx context.Context, tx txboxdriver.Tx, q string, args []any) ([]candidate, error) {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		var lane sql.NullInt16
		if err := rows.Scan(&c.id, &lane); err != nil {
			return nil, err
		}
		c.lane = -1
		if lane.Valid {
			c.lane = lane.Int16
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// validLanes locks the fence rows of the lanes of the keyed candidates
// (fence_lock), then reads which of their leases still hold (lane_valid);
// nothing when no candidate has a key.
func (m *mysqlLanes) validLanes(ctx context.Context, tx txboxdriver.Tx, l *Lanes, cands []candidate, leases []Lease) (valid [NumLanes]bool, err error) {
	var used [NumLanes]bool
	for _, c := range cands {
		if c.lane >= 0 && int(c.lane) < NumLanes {
			used[c.lane] = true
		}
	}
	var lanes []any
	pairs := []any{l.owner}
	for _, ls := range leases {
		if ls.Lane >= 0 && int(ls.Lane) < NumLanes && used[ls.Lane] {
			used[ls.Lane] = false // once, should a lane be listed twice
			lanes = append(lanes, ls.Lane)
			pairs = append(pairs, ls.Lane, ls.Epoch)
		}
	}
	if len(lanes) == 0 {
		return valid, nil
	}
	q, args := bindInts(expandList(l.s.d, m.q.lock, len(lanes)), lanes)
	if _, err = column[int16](ctx, tx, q, args...); err != nil {
		return valid, err
	}
	ok, err := column[int16](ctx, tx, expandList(l.s.d, m.q.valid, len(lanes)), pairs...)
	if err != nil {
		return valid, err
	}
	for _, v := range ok {
		if ln := v.(int16); ln >= 0 && int(ln) < NumLanes {
			valid[ln] = true
		}
	}
	return valid, nil
}

// column runs q and returns its one column, each value scanned as a T.
func column[T any](ctx context.Context, ex txboxdriver.Executor, q string, args ...any) ([]any, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []any
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (m *mysqlLanes) join(ctx context.Context, l *Lanes, ttl time.Duration) (int, error) {
	if _, err := l.s.pool.Exec(ctx, m.q.join, l.owner, ttl.Microseconds()); err != nil {
		return 0, err
	}
	return queryInt(ctx, l.s.pool, m.q.count, l.owner)
}

// renew: no other relay takes a lane whose lease was just extended, so
// the leases read after the UPDATE are the ones it extended.
func (m *mysqlLanes) renew(ctx context.Context, l *Lanes, ttl time.Duration) ([]Lease, error) {
	if _, err := l.s.pool.Exec(ctx, m.q.renew, ttl.Microseconds(), l.owner); err != nil {
		return nil, err
	}
	return l.leases(ctx, m.q.owned, l.owner)
}

// acquire locks free lanes, takes them and reads their epochs in one READ
// COMMITTED transaction (no locks on the lanes it passes over).
func (m *mysqlLanes) acquire(ctx context.Context, l *Lanes, ttl time.Duration, n int) (out []Lease, err error) {
	s := l.s
	tx, err := s.d.beginClaim(ctx, s.pool, s.lease)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	free, err := column[int16](ctx, tx, m.q.free, n)
	if err != nil || len(free) == 0 {
		if err == nil {
			err = tx.Commit(ctx)
		}
		return nil, err
	}
	args := append([]any{l.owner, ttl.Microseconds()}, free...)
	if _, err = tx.Exec(ctx, expandList(s.d, m.q.take, len(free)), args...); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, expandList(s.d, m.q.taken, len(free)), free...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var ls Lease
		if err = rows.Scan(&ls.Lane, &ls.Epoch); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, ls)
	}
	rows.Close()
	if err = rows.Err(); err != nil {
		return nil, err
	}
	if err = tx.Commit(ctx); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Lease) int { return int(a.Lane) - int(b.Lane) })
	return out, nil
}

// fence: SKIP LOCKED passes over the fence rows that claim transactions
// share-lock; the exclusive locks of the others end with the commit.
func (m *mysqlLanes) fence(ctx context.Context, l *Lanes, lanes []int16) ([]int16, error) {
	s := l.s
	tx, err := s.d.beginClaim(ctx, s.pool, s.lease)
	if err != nil {
		return nil, err
	}
	args := make([]any, len(lanes))
	for i, ln := range lanes {
		args[i] = ln
	}
	free, err := column[int16](ctx, tx, expandList(s.d, m.q.fence, len(args)), args...)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	out := make([]int16, len(free))
	for i, f := range free {
		out[i] = f.(int16)
	}
	return out, nil
}

func (m *mysqlLanes) release(ctx context.Context, l *Lanes, lanes []int16) error {
	args := []any{l.owner}
	for _, ln := range lanes {
		args = append(args, ln)
	}
	_, err := l.s.pool.Exec(ctx, expandList(l.s.d, m.q.release, len(lanes)), args...)
	return err
}

func (m *mysqlLanes) leave(ctx context.Context, l *Lanes) error {
	_, err := l.s.pool.Exec(ctx, m.q.leave, l.owner)
	return err
}
