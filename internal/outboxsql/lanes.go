package outboxsql

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/txbox/txbox/driver"
	"github.com/txbox/txbox/internal/sqltext"
)

//go:embed sql/postgres_lanes.sql
var postgresLanesSQL string

// NumLanes is how many lanes the outbox table's lane column has (see
// migration 006_lanes and docs/guide/scaling.md).
const NumLanes = 16

// ErrLanesUnsupported is returned by NewLanes on a dialect without lanes.
var ErrLanesUnsupported = errors.New("txbox: lanes are only supported on PostgreSQL, MySQL and MariaDB")

// Lease is one lane a relay owns, and the fencing epoch of its lease.
type Lease struct {
	Lane  int16
	Epoch int64
}

// Lanes runs the lane-lease SQL of one outbox table for one relay.
type Lanes struct {
	s     *Store
	owner string
	my    *mysqlLanes // MySQL, MariaDB; nil on PostgreSQL
	q     struct {
		lock, claim, claimRuns, join, renew, acquire, fence, release, leave string
	}
}

// NewLanes returns the lanes of s's table, owned as owner (unique per
// relay run).
func NewLanes(s *Store, table string, owner string) (*Lanes, error) {
	l := &Lanes{s: s, owner: owner}
	switch s.d.(type) {
	case *postgres:
	case *mysql:
		var err error
		l.my, err = newMySQLLanes(table)
		return l, err
	default:
		return nil, ErrLanesUnsupported
	}
	schema, name := unqualify(table)
	funcs := sqltext.Names(driver.Postgres, schema, name)
	err := sqltext.Load("outbox/postgres_lanes", postgresLanesSQL, funcs, map[string]*string{
		"lane_lock": &l.q.lock, "claim_lanes": &l.q.claim, "claim_lanes_runs": &l.q.claimRuns, "lane_join": &l.q.join, "lane_renew": &l.q.renew,
		"lane_acquire": &l.q.acquire, "lane_fence": &l.q.fence, "lane_release": &l.q.release, "lane_leave": &l.q.leave,
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Owner is the name under which this relay owns lanes.
func (l *Lanes) Owner() string { return l.owner }

// Claim is Store.Claim with its keyed rows restricted to the leases: it
// reads keyed rows only of their lanes, and only of those whose owner and
// epoch in the lanes table are still these (a lease taken over yields
// nothing); rows without a key come from any lane. The transaction holds a shared lock
// on each lane until Finish or Release, which a takeover waits for (Fence).
func (l *Lanes) Claim(ctx context.Context, limit int, from int64, leases []Lease) (*Batch, error) {
	return l.ClaimReaching(ctx, limit, from, from, leases)
}

// ClaimReaching is Claim whose window reaches past reach, as
// Store.ClaimReaching.
func (l *Lanes) ClaimReaching(ctx context.Context, limit int, from, reach int64, leases []Lease) (*Batch, error) {
	return l.claim(ctx, limit, from, reach, leases, nil)
}

// ClaimRuns is Claim taking runs of a key, as Store.ClaimRuns.
func (l *Lanes) ClaimRuns(ctx context.Context, limit int, from, reach int64, leases []Lease, floors Floors) (*Batch, error) {
	return l.claim(ctx, limit, from, reach, leases, &floors)
}

func (l *Lanes) claim(ctx context.Context, limit int, from, reach int64, leases []Lease, floors *Floors) (*Batch, error) {
	if l.my != nil {
		return l.my.claim(ctx, l, limit, from, leases) // no runs on MySQL
	}
	s := l.s
	b := &Batch{s: s, Started: time.Now()}
	lock, claim := l.statements(limit, from, reach, leases, floors)
	q, args := claim.SQL, claim.Args
	var rows driver.Rows
	var err error
	if qb, ok := s.pool.(driver.QueryBeginner); ok {
		// BEGIN, the lane locks and the claim in one round trip.
		if b.tx, rows, err = qb.BeginQuery(ctx, driver.TxOptions{}, []driver.Statement{lock}, driver.Statement{SQL: q, Args: args}); err != nil {
			return nil, fmt.Errorf("claim transaction: %w", err)
		}
	} else {
		if b.tx, err = s.pool.Begin(context.WithoutCancel(ctx)); err != nil {
			return nil, err
		}
		if _, err := b.tx.Exec(ctx, lock.SQL, lock.Args...); err != nil {
			_ = b.tx.Rollback(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("claim transaction: lane locks: %w", err)
		}
		rows, err = b.tx.Query(ctx, q, args...)
	}
	if err == nil {
		b.Rows, b.Next, err = s.scanClaimed(rows, limit, true)
	}
	if err != nil {
		_ = b.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return b, nil
}

// statements returns a PostgreSQL lanes claim's statements: the lane
// locks (with the claim transaction's settings) and the claim, with runs
// when floors is not nil.
func (l *Lanes) statements(limit int, from, reach int64, leases []Lease, floors *Floors) (lock, claim driver.Statement) {
	lanes := make([]int32, len(leases))
	smalls := make([]int16, len(leases))
	epochs := make([]int64, len(leases))
	for i, ls := range leases {
		lanes[i], smalls[i], epochs[i] = int32(ls.Lane), ls.Lane, ls.Epoch
	}
	lock = driver.Statement{SQL: l.q.lock, Args: []any{leaseMillis(l.s.lease), lanes}}
	// The window holds about as many rows of these lanes as a claim's
	// without lanes holds in all: a relay that owns a quarter of the lanes
	// reads four times the ids.
	window := claimWindow(limit) * int64(NumLanes) / int64(max(len(leases), 1))
	claim = driver.Statement{SQL: l.q.claim, Args: []any{limit, from, smalls, epochs, l.owner, window, reach}}
	if floors != nil {
		claim = driver.Statement{SQL: l.q.claimRuns, Args: []any{limit, from, smalls, epochs, l.owner, floors.Keys, floors.Seqs, reach, window}}
	}
	return lock, claim
}

// Join records the relay as alive for ttl and returns how many relays are
// alive, itself included.
func (l *Lanes) Join(ctx context.Context, ttl time.Duration) (int, error) {
	if l.my != nil {
		return l.my.join(ctx, l, ttl)
	}
	return queryInt(ctx, l.s.pool, l.q.join, l.owner, ttl.Milliseconds())
}

// queryInt runs q and returns the int in the first column of its first
// row, or 0 when it returns none.
func queryInt(ctx context.Context, ex driver.Executor, q string, args ...any) (int, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}

// Renew extends every lease the relay still owns by ttl and returns them.
func (l *Lanes) Renew(ctx context.Context, ttl time.Duration) ([]Lease, error) {
	if l.my != nil {
		return l.my.renew(ctx, l, ttl)
	}
	return l.leases(ctx, l.q.renew, l.owner, ttl.Milliseconds())
}

// Acquire takes up to n free or expired lanes for ttl, each with a new
// epoch. They may be claimed from only once Fence returns them.
func (l *Lanes) Acquire(ctx context.Context, ttl time.Duration, n int) ([]Lease, error) {
	if l.my != nil {
		return l.my.acquire(ctx, l, ttl, n)
	}
	return l.leases(ctx, l.q.acquire, l.owner, ttl.Milliseconds(), n)
}

// Fence returns the lanes of lanes that no claim transaction (of any
// relay) holds now.
func (l *Lanes) Fence(ctx context.Context, lanes []int16) ([]int16, error) {
	if l.my != nil {
		return l.my.fence(ctx, l, lanes)
	}
	ints := make([]int32, len(lanes))
	for i, ln := range lanes {
		ints[i] = int32(ln)
	}
	rows, err := l.s.pool.Query(ctx, l.q.fence, ints)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int16
	for rows.Next() {
		var ln int32
		if err := rows.Scan(&ln); err != nil {
			return nil, err
		}
		out = append(out, int16(ln))
	}
	return out, rows.Err()
}

// Release gives the lanes up, for another relay to take at once.
func (l *Lanes) Release(ctx context.Context, lanes []int16) error {
	if l.my != nil {
		return l.my.release(ctx, l, lanes)
	}
	_, err := l.s.pool.Exec(ctx, l.q.release, l.owner, lanes)
	return err
}

// Leave removes the relay from the relays sharing the lanes (and rows of
// relays gone for an hour).
func (l *Lanes) Leave(ctx context.Context) error {
	if l.my != nil {
		return l.my.leave(ctx, l)
	}
	_, err := l.s.pool.Exec(ctx, l.q.leave, l.owner)
	return err
}

func (l *Lanes) leases(ctx context.Context, q string, args ...any) ([]Lease, error) {
	rows, err := l.s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		var ls Lease
		if err := rows.Scan(&ls.Lane, &ls.Epoch); err != nil {
			return nil, err
		}
		out = append(out, ls)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Lease) int { return int(a.Lane) - int(b.Lane) })
	return out, nil
}
