package outboxsql

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox/internal/sqltext"
	"github.com/txbox/txbox/txboxdriver"
)

//go:embed sql/postgres_lanes.sql
var postgresLanesSQL string

// NumLanes is how many lanes the outbox table has: a keyed row's lane is a
// hash of its key modulo NumLanes (the lane index and the lanes table of
// the baseline migration; docs/design/relay.md).
const NumLanes = 64

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
		lock, lockActive, claim, claimChecked, unkeyed, join, renew, acquire, fence, release, leave string
	}
	// Rescan is how long a key found parked is left out of the lane reads
	// (Claim). Default: a second.
	Rescan time.Duration
	// FullScan is how often, at least, the live relays together read rows
	// without a key from the table's start in a backlog: each relay every
	// FullScan times the live relays (unkeyedFrom). Default: 250 ms.
	FullScan time.Duration

	conflicts atomic.Int64
	inFlight  atomic.Int64 // MySQL: rows in this relay's batches in flight
	// claimMu is held by a claim up to its pick (MySQL: the whole claim),
	// and guards turn, claims, active, many, idle and full.
	claimMu sync.Mutex
	turn    int            // the first lease of the next claim
	claims  int            // claims so far
	active  int            // lanes estimated to have rows (activeLanes)
	many    bool           // the last read met many keys per lane (perLane)
	idle    [NumLanes]bool // the lane gave no row at its last read, holds no key in flight
	full    int            // the limit of the last claim if it came full, else 0
	partial atomic.Bool    // full != 0, or the last read left lanes unread (FromStart)
	from    int64          // where the next claim's read of rows without a key starts (unkeyedFrom)
	stride  int64          // the ids the last backlog claim's rows without a key spanned (unkeyedFrom)
	relays  atomic.Int32   // live relays at the last Join
	scanned time.Time      // when a claim last read rows without a key from the start
	checked time.Time      // until when claims run lane_claim_checked (Claim)
	mu      sync.Mutex
	heldIn  [NumLanes]int        // keys in this relay's batches in flight, per lane (mu)
	parked  map[string]struct{}  // keys whose first row is dead
	since   time.Time            // when parked was last emptied
	later   map[string]time.Time // keys whose first row retries later, until when to leave them out
}

// NewLanes returns the lanes of s's table, owned as owner (unique per
// relay run).
func NewLanes(s *Store, table string, owner string) (*Lanes, error) {
	l := &Lanes{s: s, owner: owner, Rescan: time.Second, FullScan: fullScan}
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
	funcs := sqltext.Names(txboxdriver.Postgres, schema, name)
	err := sqltext.Load("outbox/postgres_lanes", postgresLanesSQL, funcs, map[string]*string{
		"lane_lock": &l.q.lock, "lane_lock_active": &l.q.lockActive, "lane_claim": &l.q.claim, "lane_claim_checked": &l.q.claimChecked, "claim_unkeyed": &l.q.unkeyed, "lane_join": &l.q.join, "lane_renew": &l.q.renew,
		"lane_acquire": &l.q.acquire, "lane_fence": &l.q.fence, "lane_release": &l.q.release, "lane_leave": &l.q.leave,
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Owner is the name under which this relay owns lanes.
func (l *Lanes) Owner() string { return l.owner }

// Conflicts counts the claims that read a keyed row of an owned lane that
// another transaction held locked: someone locked an outbox row by hand, or
// two relays own one lane (a fencing failure). Such a claim leaves that
// row's key out from that row on (Claim).
func (l *Lanes) Conflicts() int64 { return l.conflicts.Load() }

// Claim takes up to limit rows: keyed rows only from the lanes of leases
// whose owner and epoch in the lanes table are still these (a lease taken
// over yields nothing), rows without a key from anywhere. The transaction
// holds a shared lock on each lane until Finish or Release, which a
// takeover waits for (Fence).
//
// On PostgreSQL it is one round trip: the lane locks (outside a backlog,
// while most lanes had no rows at the last claim, only of the lanes that
// have undelivered keyed rows, found by a loose scan of the lane index:
// lane_lock_active), then one statement
// (lane_claim): rows without a key SKIP LOCKED, and the owner's read of
// the lanes it locked, each from its first undelivered row in id order,
// each row locked as it is read, NOWAIT. Only a lane's owner locks its
// rows, so a row held by another transaction is a transaction holding
// outbox rows or a fencing failure: it fails that statement, and the claim
// runs again, and for Rescan after, as lane_claim_checked (the rows read,
// then locked SKIP LOCKED, and which were). There a row read but held
// stops its key for this claim (counted in Conflicts): the key is not
// published out of order while the rest of the lane, the other lanes and
// the rows without a key go on. Each lane gives at
// most limit divided by the number of lanes that had rows at the last
// claim (activeLanes), and all
// lanes limit in all (perLane), the lanes taken round robin from where the
// last claim stopped (lanesToRead): one claim reads about one batch,
// whatever the lanes. A key's first row the owner meets is its head: only
// the lane's owner publishes the lane's rows, and the insert-time key lock
// makes a key's id order its commit order, so a key's rows that are not
// yet visible all come after the visible ones. The pick, in Go, takes each
// key's rows up to its first dead row (the key is parked: left out of the
// reads for Rescan) or its first row not yet due (left out until due).
// Every lane it read rows of is left out of this relay's other claims
// until this batch ends: those rows are locked here, and a read that left
// out only their keys would step over every row of those keys.
func (l *Lanes) Claim(ctx context.Context, limit int, leases []Lease) (*Batch, error) {
	if l.my != nil {
		return l.my.claim(ctx, l, limit, 0, leases)
	}
	// A relay's claims take turns up to their pick: the next one leaves
	// out every key this one locked.
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	s := l.s
	b := &Batch{s: s, Started: time.Now()}
	perLane := l.perLane(limit)
	read, at := l.lanesToRead(leases, l.full >= limit, 2*((limit+perLane-1)/perLane))
	lanes32 := make([]int32, len(read))
	lanes := make([]int16, len(read))
	epochs := make([]int64, len(read))
	skip := l.skipped(b.Started)
	for i, ls := range read {
		lanes32[i], lanes[i], epochs[i] = int32(ls.Lane), ls.Lane, ls.Epoch
	}
	lock := txboxdriver.Statement{SQL: l.q.lock, Args: []any{leaseMillis(s.lease), lanes32}}
	if len(read) > 0 && l.full < limit && 2*l.active < len(read) {
		// Not a backlog (in one, lanesToRead chose a few lanes that had
		// rows), and most lanes had no rows at the last claim: lock and
		// read the lanes that have rows. When most have, finding them
		// costs a probe of each for nothing.
		lock.SQL = l.q.lockActive
	}
	from := l.unkeyedFrom(b.Started, l.full >= limit)
	claim := txboxdriver.Statement{SQL: l.q.claim, Args: []any{lanes, epochs, perLane, l.owner, skip, limit, limit, from}}
	if b.Started.Before(l.checked) {
		claim.SQL = l.q.claimChecked
	}
	if len(read) == 0 {
		// No lane to read (a backlog without keys): the plain SKIP LOCKED
		// claim (lanes32 is empty: no lane lock).
		claim = txboxdriver.Statement{SQL: l.q.unkeyed, Args: []any{limit, from}}
	}
	w, err := l.run(ctx, b, lock, claim, limit, lanes)
	if err != nil && claim.SQL == l.q.claim && lockNotAvailable(err) {
		// A keyed row read is held by another transaction (a row locked by
		// hand, or a fencing failure): lane_claim locks each row as it
		// reads it, NOWAIT, and failed whole. Claim again, and for Rescan,
		// with the claim that tells such rows from the rest and stops
		// their keys there.
		release(ctx, b)
		l.checked = time.Now().Add(l.Rescan)
		b = &Batch{s: s, Started: time.Now()}
		claim.SQL = l.q.claimChecked
		w, err = l.run(ctx, b, lock, claim, limit, lanes)
	}
	if err == nil {
		// The next claim starts at the last lane this one read rows of
		// when the limit cut its read short (past it when none of its
		// rows could be taken: its keys wait behind a held row), else at
		// the next lane. A read cut short did not read every lane: the
		// next claim comes at once (FromStart).
		cut := w.reached < len(read)
		if cut {
			i := max(w.reached-1, 0)
			l.turn = at[i]
			if !w.took[read[i].Lane] {
				l.turn = (at[i] + 1) % len(leases)
			}
		} else if len(leases) > 0 {
			l.turn = (l.turn + 1) % len(leases)
		}
		l.partial.Store(l.full != 0 || cut)
		l.from = l.nextFrom(from, w, limit)
	}
	if err != nil {
		release(ctx, b)
		return nil, err
	}
	b.Rows = w.rows
	b.onEnd = func() { l.unhold(w.lanes) }
	return b, nil
}

// run begins b's claim transaction with lock, runs claim in it and picks
// (walk) from its rows. On an error the caller ends b's transaction, if
// any (release).
func (l *Lanes) run(ctx context.Context, b *Batch, lock, claim txboxdriver.Statement, limit int, lanes []int16) (walk, error) {
	s := l.s
	var rows txboxdriver.Rows
	var err error
	if qb, ok := s.pool.(txboxdriver.QueryBeginner); ok {
		// BEGIN, the lane locks and the claim in one round trip.
		if b.tx, rows, err = qb.BeginQuery(ctx, txboxdriver.TxOptions{}, []txboxdriver.Statement{lock}, claim); err != nil {
			b.tx = nil // ended by BeginQuery
			return walk{}, fmt.Errorf("claim transaction: %w", err)
		}
	} else {
		if b.tx, err = s.pool.Begin(context.WithoutCancel(ctx)); err != nil {
			b.tx = nil
			return walk{}, err
		}
		if _, err := b.tx.Exec(ctx, lock.SQL, lock.Args...); err != nil {
			return walk{}, fmt.Errorf("claim transaction: lane locks: %w", err)
		}
		if rows, err = b.tx.Query(ctx, claim.SQL, claim.Args...); err != nil {
			return walk{}, err
		}
	}
	b.Answered = time.Now()
	return l.walk(rows, limit, lanes)
}

// release ends the transaction of a claim that failed, if it has one.
func release(ctx context.Context, b *Batch) {
	if b.tx != nil {
		_ = b.Release(context.WithoutCancel(ctx))
	}
}

// lockNotAvailable reports whether err is PostgreSQL's lock_not_available
// (SQLSTATE 55P03: a NOWAIT lock found the row held).
func lockNotAvailable(err error) bool {
	var state interface{ SQLState() string }
	return errors.As(err, &state) && state.SQLState() == "55P03"
}

// FromStart reports whether the last claim, and the next one unless
// another begins first, read from the table's start: every lane of its
// leases, each from its first undelivered row, and rows without a key
// from the first. On PostgreSQL a claim that follows a full one does not
// (a backlog: see lanesToRead and unkeyedFrom), nor one that follows a
// read the limit cut short before its last lane (rows of keys that wait
// behind a held row can fill a read).
func (l *Lanes) FromStart() bool {
	return l.my != nil || !l.partial.Load()
}

// walk is what a claim picked: its rows in id order (a keyed row that
// follows another of its key in the batch has it as Prev), and every key
// it read, in flight until the batch ends.
type walk struct {
	rows    []Claimed
	keys    []string
	lanes   []int16        // the lane of each of keys
	reached int            // how many lanes of the read's order it reached
	took    map[int16]bool // the lanes it took rows of
	unkeyed int64          // the last row without a key it took, or 0
}

// laneRow is a row lane_claim returned: a keyed row of a lane (lane >= 0),
// or a row without a key (lane -1); later: its retry is not yet due (at
// due); locked: the claim holds its lock (false: another transaction does).
type laneRow struct {
	c                   Claimed
	lane                int16
	dead, later, locked bool
	due                 time.Time
}

// walk reads lane_claim's rows and picks, in id order, up to limit rows in
// all (see Claim). Rows it does not pick stay locked, unpublished, until
// the batch ends.
func (l *Lanes) walk(rows txboxdriver.Rows, limit int, order []int16) (walk, error) {
	all := make([]laneRow, 0, 2*limit)
	// One row's destinations, reused for every row (as scanClaimed).
	var r laneRow
	created, attempts := l.s.d.newTime(), l.s.d.newInt()
	dest := []any{&r.c.Seq, &r.c.ID, &r.c.Topic, &r.c.Key, &r.c.Payload, &r.c.Headers, attempts.dest(), created.dest(), &r.lane, &r.dead, &r.later, &r.due, &r.locked}
	for rows.Next() {
		r = laneRow{}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return walk{}, err
		}
		r.c.Attempts, r.c.CreatedAt = attempts.int(), created.time()
		if err := attempts.err(); err != nil {
			r.c.Invalid = fmt.Errorf("attempts %w", err)
		} else if err := created.err(); err != nil {
			r.c.Invalid = fmt.Errorf("created_at %w", err)
		}
		all = append(all, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return walk{}, err
	}
	slices.SortFunc(all, func(a, b laneRow) int { return cmp.Compare(a.c.Seq, b.c.Seq) })
	w := walk{took: map[int16]bool{}}
	last := map[string]int64{} // a key's last picked row; -1: the key stopped
	lanes := map[int16]struct{}{}
	keyed, held := 0, false
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range all {
		full := len(w.rows) >= limit
		if r.lane < 0 {
			if !full {
				w.rows = append(w.rows, r.c)
				w.unkeyed = r.c.Seq
			}
			continue
		}
		lanes[r.lane] = struct{}{}
		keyed++
		key := r.c.Key
		p, seen := last[key]
		if !seen {
			w.keys, w.lanes = append(w.keys, key), append(w.lanes, r.lane)
		}
		switch {
		case p < 0:
			continue
		case !r.locked: // held elsewhere: the key stops here
			held = true
			last[key] = -1
			continue
		case r.dead:
			if !seen { // the key's head: parked until it is redriven or discarded
				l.parked[key] = struct{}{}
			}
			last[key] = -1
			continue
		case r.later:
			if !seen { // the key's head retries later
				until := time.Now().Add(laterRecheck * l.Rescan)
				if r.due.Before(until) {
					until = r.due
				}
				l.later[key] = until
			}
			last[key] = -1
			continue
		case full:
			last[key] = -1
			continue
		}
		r.c.Prev = max(p, 0)
		last[key] = r.c.Seq
		w.rows = append(w.rows, r.c)
		w.took[r.lane] = true
	}
	for i := range w.keys {
		l.heldIn[w.lanes[i]]++
	}
	if held {
		l.conflicts.Add(1)
	}
	var reached int
	l.active, reached = activeLanes(lanes, keyed >= limit, order)
	l.many = 2*len(w.keys) >= keyed
	w.reached = reached
	for _, ln := range order[:reached] {
		_, had := lanes[ln]
		l.idle[ln] = !had && l.heldIn[ln] == 0
	}
	l.full = 0
	if len(w.rows) >= limit {
		l.full = limit
	}
	return w, nil
}

// fullScan is the default FullScan.
const fullScan = 250 * time.Millisecond

// unkeyedFrom returns the id from which a claim at now reads rows without
// a key: in a backlog (the last claim, as large, came full) where the last
// claim said (nextFrom), so that each claim does not step again over the
// index entries of the rows just delivered, nor over the rows the other
// relays hold; from the start after a claim that was not full, and at
// least every FullScan times the live relays, so that a row without a key
// that committed late below that point, was given back, or was jumped
// over, waits at most that (the relays together read from the start about
// every FullScan). Rows without a key have no order to keep.
func (l *Lanes) unkeyedFrom(now time.Time, backlog bool) int64 {
	if l.from == 0 || !backlog || now.Sub(l.scanned) >= l.FullScan*time.Duration(max(l.relays.Load(), 1)) {
		l.scanned = now
		return 0
	}
	return l.from
}

// nextFrom returns where the next claim in a backlog reads rows without a
// key from (unkeyedFrom), after a claim of limit that read them from from
// and picked w: 0 (from the start) when it did not come full; else past
// the last one it took, and past as many ids again as its own rows
// spanned for each other live relay. Every relay claims rows without a
// key oldest first: between two claims of one relay the others each took
// about as many rows, just past its last, and hold them until their
// batches end. Stepping over them would cost the database a heap fetch
// and a lock attempt per row. The span is measured on a claim that read
// from past the start (one from the start takes rows left behind,
// scattered); a relay that jumps too far leaves rows behind for a read
// from the start (unkeyedFrom).
func (l *Lanes) nextFrom(from int64, w walk, limit int) int64 {
	if len(w.rows) < limit || w.unkeyed == 0 {
		l.stride = 0
		return 0
	}
	if from > 0 {
		l.stride = 0
		for _, c := range w.rows {
			if c.Key == "" && c.Seq >= from {
				l.stride = w.unkeyed - c.Seq + 1
				break
			}
		}
	}
	return w.unkeyed + 1 + int64(max(l.relays.Load()-1, 0))*l.stride
}

// idleEvery is how often, in claims, a claim that follows a full one reads
// a lane that gave no row at its last read.
const idleEvery = 8

// lanesToRead returns the leases a claim reads, in the order it reads
// them, and the index in leases of each: every one, from the lease where
// the last claim stopped (Claim), round robin. But in a backlog (the last
// claim, as large, came full), at most most lanes, the next ones round
// robin, and the lanes that gave no row at their last read and have no key
// in flight only every idleEvery claims: a backlog costs the lane locks
// and reads of about a batch, not one per lane, and a backlog without keys
// mostly none (a keyed row in an idle lane waits a few claims). After a
// claim that was not full, every lane is read.
func (l *Lanes) lanesToRead(leases []Lease, backlog bool, most int) ([]Lease, []int) {
	if len(leases) == 0 {
		return nil, nil
	}
	l.claims++
	l.turn %= len(leases)
	l.mu.Lock()
	inFlight := l.heldIn
	l.mu.Unlock()
	out, at := make([]Lease, 0, len(leases)), make([]int, 0, len(leases))
	for i := range leases {
		j := (l.turn + i) % len(leases)
		ls := leases[j]
		if inFlight[ls.Lane] > 0 {
			continue // its rows are locked by another batch of this relay
		}
		if backlog && l.idle[ls.Lane] {
			if l.claims%idleEvery == 0 {
				out, at = append(out, ls), append(at, j)
			}
			continue
		}
		if backlog && most == 0 {
			continue
		}
		most--
		out, at = append(out, ls), append(at, j)
	}
	return out, at
}

// minRun is how many rows a claim reads of a lane at least while its lanes
// hold many keys each: reading fewer rows of more lanes costs an index
// probe and a lock step per lane for few rows. With few keys per lane the
// rows of a lane are runs of one key, published in waves, and reading
// fewer rows of more lanes sends more keys side by side.
const minRun = 16

// perLane is how many rows a claim of limit rows reads of each lane at
// most: limit over the lanes that have rows (activeLanes), at least minRun
// while the last read met many keys per lane (at least every other row a
// key's first), and at most limit.
func (l *Lanes) perLane(limit int) int {
	if l.active == 0 {
		return limit
	}
	n := (limit + l.active - 1) / l.active
	if l.many {
		n = max(n, minRun)
	}
	return min(n, limit)
}

// activeLanes estimates how many of the lanes of order have rows, from
// the lanes a claim read rows of, and says how many lanes of order the
// claim read: when its read stopped at its limit, the lanes after the last
// one it read rows from were not read, and are assumed alike. active is 0
// when no lane had rows: the next claim reads each lane up to its limit.
func activeLanes(read map[int16]struct{}, cut bool, order []int16) (active, reached int) {
	if !cut || len(read) == 0 {
		return len(read), len(order)
	}
	for i, ln := range order {
		if _, ok := read[ln]; ok {
			reached = i + 1
		}
	}
	return (len(read)*len(order) + reached - 1) / reached, reached
}

// laterRecheck is how many Rescans a key whose head is not yet due is left
// out at most: the head may be cancelled (deleted) or rescheduled sooner
// by hand, which the relay does not see otherwise.
const laterRecheck = 60

// skipped returns the keys lane_claim leaves out: parked (forgotten every
// Rescan, so that a redriven or discarded dead row frees its key) and
// retrying later (until due, or laterRecheck Rescans at most). Keys in flight are left out with their lanes
// (lanesToRead).
func (l *Lanes) skipped(now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.parked == nil || now.Sub(l.since) >= l.Rescan {
		l.parked, l.since = map[string]struct{}{}, now
	}
	if l.later == nil {
		l.later = map[string]time.Time{}
	}
	out := make([]string, 0, len(l.parked)+len(l.later))
	for k := range l.parked {
		out = append(out, k)
	}
	for k, due := range l.later {
		if !now.Before(due) {
			delete(l.later, k)
			continue
		}
		out = append(out, k)
	}
	return out
}

// unhold forgets the keys in flight of a batch that ended, in lanes (see
// walk).
func (l *Lanes) unhold(lanes []int16) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range lanes {
		l.heldIn[lanes[i]]--
	}
}

// Join records the relay as alive for ttl and returns how many relays are
// alive, itself included.
func (l *Lanes) Join(ctx context.Context, ttl time.Duration) (int, error) {
	if l.my != nil {
		return l.my.join(ctx, l, ttl)
	}
	n, err := queryInt(ctx, l.s.pool, l.q.join, l.owner, ttl.Milliseconds())
	if err == nil {
		l.relays.Store(int32(n))
	}
	return n, err
}

// queryInt runs q and returns the int in the first column of its first
// row, or 0 when it returns none.
func queryInt(ctx context.Context, ex txboxdriver.Executor, q string, args ...any) (int, error) {
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
