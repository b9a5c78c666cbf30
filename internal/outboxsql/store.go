package outboxsql

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// Claimed is one claimed outbox row.
type Claimed struct {
	Seq       int64
	ID        string
	Topic     string
	Key       string
	Payload   []byte
	Headers   []byte // JSON object text
	Attempts  int
	CreatedAt time.Time
	// Invalid says why the row cannot be read as a message (a column of
	// the wrong type, written by plain SQL on SQLite), or is nil.
	Invalid error
	// Prev is the Seq of the row of the same key that this one follows in
	// the batch (Lanes.Claim): it may be published only once Prev was
	// acknowledged. 0 for a key's head and rows without a key.
	Prev int64
}

// Rejection records a broker's refusal of one claimed row.
type Rejection struct {
	Seq        int64
	Err        string
	RetryAfter time.Duration // until the next attempt
	Dead       bool          // this rejection used the last attempt (for the log)
	// Invalid: the row breaks the contract and is dead at once, whatever
	// its attempts.
	Invalid bool
}

// Store runs the relay's SQL on one outbox table.
type Store struct {
	d     dialect
	pool  txboxdriver.Pool
	lease time.Duration
	// deletePublished makes Finish delete published rows instead of
	// marking them.
	deletePublished bool
}

// MaxClaimLease is the longest claim lease. On SQLite, a lease that ends
// later than this from now was not written by a relay, and the claim
// treats it as expired (the table's triggers refuse it too).
const MaxClaimLease = 2 * time.Hour

// NewStore returns a Store for the quoted table; lease is how long a claim
// may hold its rows: on SQLite, the lease after which another relay may
// take them; on PostgreSQL, the idle time after which the server ends the
// claim transaction (idle_in_transaction_session_timeout), and with it the
// row locks of a relay whose connection vanished. MySQL ignores it.
func NewStore(d txboxdriver.Dialect, pool txboxdriver.Pool, table string, lease time.Duration) (*Store, error) {
	dl, err := newDialect(d, table)
	if err != nil {
		return nil, err
	}
	return &Store{d: dl, pool: pool, lease: lease}, nil
}

// pipelinedClaim is a dialect whose claim transaction may begin with its
// settings and the claim in one round trip, where the Pool is a
// txboxdriver.QueryBeginner.
type pipelinedClaim interface {
	// claimSetup returns what beginClaim runs after BEGIN.
	claimSetup(lease time.Duration) []txboxdriver.Statement
}

// DeletePublished makes Finish delete published rows, in the transaction
// that would have marked them, instead of keeping them for cleanup.
func (s *Store) DeletePublished() { s.deletePublished = true }

// Batch is a claim on some rows, ended by Finish or Release.
type Batch struct {
	Rows  []Claimed
	s     *Store
	tx    txboxdriver.Tx // PostgreSQL, MySQL: the transaction holding the row locks
	token string         // SQLite: the lease token
	// scanned: the claim's rows were read, so the lease holds Rows only
	// (SQLite); otherwise its rows are unknown.
	scanned bool
	// Started is when Lanes.Claim began the claim, once the relay's claim
	// before it had picked (zero otherwise); Answered, when the server
	// answered it, before the pick (PostgreSQL; zero otherwise).
	Started, Answered time.Time
	// onEnd, when not nil, runs once the batch's transaction or lease has
	// ended (Finish, Release).
	onEnd func()
}

// Tx is the transaction holding the batch's row locks (PostgreSQL, MySQL),
// or nil (SQLite).
func (b *Batch) Tx() txboxdriver.Tx { return b.tx }

// Claim takes up to limit deliverable rows with ids from from on, oldest
// first, a keyed row only at the head of its key. An empty batch still
// needs Release. from 0 looks at every row; a higher from misses rows
// below it (a transaction that commits out of id order, a retry that came
// due). The relay claims this way on SQLite; on PostgreSQL, MySQL and
// MariaDB it claims with Lanes.Claim.
func (s *Store) Claim(ctx context.Context, limit int, from int64) (*Batch, error) {
	// The transaction must outlive ctx: database/sql rolls a transaction
	// back when its context ends, and a relay that is stopping still
	// marks what the broker acknowledged.
	b := &Batch{s: s}
	var q string
	var args []any
	query := func() {
		now := time.Now()
		q, args = s.d.claim(limit, from, b.token, now.Add(s.lease), now)
	}
	var rows txboxdriver.Rows
	var err error
	pd, pipelined := s.d.(pipelinedClaim)
	qb, ok := s.pool.(txboxdriver.QueryBeginner)
	if pipelined && ok {
		// BEGIN, the settings and the claim in one round trip.
		query()
		if b.tx, rows, err = qb.BeginQuery(ctx, txboxdriver.TxOptions{}, pd.claimSetup(s.lease), txboxdriver.Statement{SQL: q, Args: args}); err != nil {
			return nil, err
		}
	} else {
		if b.tx, err = s.d.beginClaim(context.WithoutCancel(ctx), s.pool, s.lease); err != nil {
			return nil, err
		}
		var ex txboxdriver.Executor = s.pool
		if b.tx != nil {
			ex = b.tx
		} else {
			b.token = newToken()
		}
		query()
		rows, err = ex.Query(ctx, q, args...)
	}
	if err != nil {
		// A lease's UPDATE may have committed: release what it took.
		_ = b.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return s.scanBatch(ctx, b, rows, limit)
}

// scanBatch reads the claim's rows into b; on an error it releases b.
func (s *Store) scanBatch(ctx context.Context, b *Batch, rows txboxdriver.Rows, limit int) (*Batch, error) {
	var err error
	b.Rows, err = s.scanClaimed(rows, limit)
	if err != nil {
		// A lease's UPDATE may have committed: release what it took.
		_ = b.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	b.scanned = true
	// A lease's UPDATE … RETURNING returns rows in no particular order.
	if !slices.IsSortedFunc(b.Rows, bySeq) {
		slices.SortFunc(b.Rows, bySeq)
	}
	return b, nil
}

func bySeq(a, b Claimed) int { return cmp.Compare(a.Seq, b.Seq) }

// scanClaimed reads the claimed rows.
func (s *Store) scanClaimed(rows txboxdriver.Rows, limit int) ([]Claimed, error) {
	defer rows.Close()
	out := make([]Claimed, 0, min(limit, 4096))
	// One row's destinations, reused for every row: the claim is the
	// relay's hot path, and a batch may hold thousands of rows.
	var c Claimed
	created, attempts := s.d.newTime(), s.d.newInt()
	dest := []any{&c.Seq, &c.ID, &c.Topic, &c.Key, &c.Payload, &c.Headers, attempts.dest(), created.dest()}
	for rows.Next() {
		c = Claimed{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		c.Attempts, c.CreatedAt = attempts.int(), created.time()
		if err := attempts.err(); err != nil {
			c.Invalid = fmt.Errorf("attempts %w", err)
		} else if err := created.err(); err != nil {
			c.Invalid = fmt.Errorf("created_at %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Runs reports whether any claimed row follows another of its key
// (Claimed.Prev).
func (b *Batch) Runs() bool {
	for _, r := range b.Rows {
		if r.Prev != 0 {
			return true
		}
	}
	return false
}

// Keyed reports whether any claimed row has an ordering key.
func (b *Batch) Keyed() bool {
	for _, r := range b.Rows {
		if r.Key != "" {
			return true
		}
	}
	return false
}

// Finish marks published rows as published and records rejections; every
// other claimed row is released untouched (no attempt counted). On
// PostgreSQL the marks commit without waiting for the disk (see
// lazy_commit in sql/postgres.sql).
func (b *Batch) Finish(ctx context.Context, published []int64, rejected []Rejection, maxAttempts int) error {
	defer b.end()
	s, tx := b.s, b.tx
	if tx == nil {
		if len(published) == 0 && len(rejected) == 0 && b.scanned && len(b.Rows) == 0 {
			return nil // an empty lease: nothing to mark nor release
		}
		// A lease: the marks commit together in a short transaction of
		// their own.
		var err error
		if tx, err = s.pool.Begin(ctx); err != nil {
			return err
		}
	}
	if ec, ok := tx.(txboxdriver.ExecCommitter); ok && b.token == "" && len(rejected) == 0 && len(published) > 0 {
		if sql, args, ok := b.lazyMark(published); ok {
			// The mark and COMMIT in one round trip.
			if _, err := ec.ExecCommit(ctx, sql, args...); err != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
				return fmt.Errorf("mark published and commit: %w", err)
			}
			return nil
		}
	}
	if err := b.finish(ctx, tx, published, rejected, maxAttempts); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit marks: %w", err)
	}
	return nil
}

// lazyMark returns the mark of published rows with the lazy commit folded
// in, where the dialect has that (PostgreSQL); ok is false elsewhere.
func (b *Batch) lazyMark(published []int64) (sql string, args []any, ok bool) {
	if !b.s.marksLazily() {
		return "", nil, false
	}
	sql, args = b.s.d.(lazyMarker).markPublishedLazy(published, b.s.deletePublished)
	return sql, args, true
}

// marksLazily reports whether the dialect's mark carries the lazy commit
// (lazyMark).
func (s *Store) marksLazily() bool {
	_, ok := s.d.(lazyMarker)
	return ok && s.d.queries().lazyCommit != ""
}

func (b *Batch) finish(ctx context.Context, tx txboxdriver.Tx, published []int64, rejected []Rejection, maxAttempts int) error {
	d, q := b.s.d, b.s.d.queries()
	now := time.Now()
	lazy := q.lazyCommit != ""
	if len(published) > 0 {
		sql, args := d.markPublished(published, b.token, now)
		if b.s.deletePublished {
			sql, args = d.deletePublished(published, b.token)
		}
		if lsql, largs, ok := b.lazyMark(published); ok {
			sql, args = lsql, largs
			lazy = false // folded into the mark
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("mark published: %w", err)
		}
	}
	for _, r := range rejected {
		max := maxAttempts
		if r.Invalid {
			max = 0 // attempts + 1 >= 0: dead now
		}
		sql, args := d.reject(r, max, b.token, now)
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("record rejection: %w", err)
		}
	}
	if b.token != "" {
		if err := b.releaseLease(ctx, tx, b.left(published, rejected)); err != nil {
			return fmt.Errorf("release claim: %w", err)
		}
	}
	if lazy {
		if _, err := tx.Exec(ctx, q.lazyCommit); err != nil {
			return fmt.Errorf("lazy commit: %w", err)
		}
	}
	return nil
}

// Release gives every claimed row back without marking any.
func (b *Batch) Release(ctx context.Context) error {
	defer b.end()
	if b.tx != nil {
		return b.tx.Rollback(ctx)
	}
	return b.releaseLease(ctx, b.s.pool, b.seqs())
}

// releaseLease ends the batch's lease (SQLite) through ex on the rows
// seqs; on every row holding it when the claim's rows are unknown (the
// claim failed), a statement that reads the whole table.
func (b *Batch) releaseLease(ctx context.Context, ex txboxdriver.Executor, seqs []int64) error {
	q := b.s.d.queries()
	if !b.scanned {
		_, err := ex.Exec(ctx, q.release, b.token)
		return err
	}
	if len(seqs) == 0 {
		return nil
	}
	_, err := ex.Exec(ctx, q.releaseSeqs, b.token, idsJSON(seqs))
	return err
}

// seqs returns the ids of the claimed rows.
func (b *Batch) seqs() []int64 {
	out := make([]int64, len(b.Rows))
	for i, r := range b.Rows {
		out[i] = r.Seq
	}
	return out
}

// left returns the ids of the claimed rows neither published nor
// rejected: those Finish releases.
func (b *Batch) left(published []int64, rejected []Rejection) []int64 {
	done := make(map[int64]bool, len(published)+len(rejected))
	for _, id := range published {
		done[id] = true
	}
	for _, r := range rejected {
		done[r.Seq] = true
	}
	var out []int64
	for _, r := range b.Rows {
		if !done[r.Seq] {
			out = append(out, r.Seq)
		}
	}
	return out
}

// end runs onEnd, once.
func (b *Batch) end() {
	if f := b.onEnd; f != nil {
		b.onEnd = nil
		f()
	}
}

// Cleanup deletes up to limit rows published before cutoff and returns how
// many it deleted. It skips rows that another transaction has locked (a
// cleanup running beside it at another relay), so that cleanups share the
// work and never wait for, or deadlock with, each other.
func (s *Store) Cleanup(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	q, args := s.d.cleanup(cutoff, limit)
	lc, ok := s.d.(lockingCleanup)
	if !ok {
		return s.pool.Exec(ctx, q, args...)
	}
	tx, err := s.d.beginClaim(ctx, s.pool, s.lease)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	var seqs []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			_ = rows.Close()
			return 0, err
		}
		seqs = append(seqs, seq)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || len(seqs) == 0 {
		return 0, err
	}
	q, args = lc.deleteLocked(seqs)
	n, err := tx.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// lockingCleanup is a dialect whose DELETE cannot skip locked rows (MySQL):
// its cleanup query locks up to limit rows with SELECT … FOR UPDATE SKIP
// LOCKED in a claim transaction, and deleteLocked deletes them.
type lockingCleanup interface {
	deleteLocked(seqs []int64) (string, []any)
}

// Counts is a snapshot of the table.
type Counts struct {
	Pending          int64 // undelivered, not dead (parked ones included)
	Dead             int64
	Parked           int64 // pending rows waiting behind a dead row of their key
	OldestPendingAge time.Duration
}

// Counts reads pending and dead counts and the age of the oldest pending row.
func (s *Store) Counts(ctx context.Context) (Counts, error) {
	q, args := s.d.counts(time.Now())
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return Counts{}, err
	}
	defer rows.Close()
	var c Counts
	var age float64
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Counts{}, err
		}
		return Counts{}, txboxdriver.ErrNoRows
	}
	if err := rows.Scan(&c.Pending, &c.Dead, &c.Parked, &age); err != nil {
		return Counts{}, err
	}
	c.OldestPendingAge = time.Duration(age * float64(time.Second))
	return c, rows.Err()
}

// DeadRow is a dead message, as ListDead reports it.
type DeadRow struct {
	Seq       int64
	ID        string
	Topic     string
	Key       string
	Attempts  int
	LastError string
	CreatedAt time.Time
	DeadAt    time.Time
	Parked    int64 // later messages of the same key waiting behind it
	// Bytes are the full lengths of ID, Topic, Key and LastError in bytes
	// (ListDeadBrief; zero from ListDead).
	Bytes DeadBytes
}

// DeadBytes are the full lengths in bytes of a dead row's text columns.
type DeadBytes struct{ ID, Topic, Key, LastError int64 }

// BriefChars is how many characters ListDeadBrief reads of each text
// column of a dead row.
const BriefChars = 512

// ListDead returns up to limit dead rows, oldest first.
func (s *Store) ListDead(ctx context.Context, limit int) ([]DeadRow, error) {
	return s.listDead(ctx, s.d.queries().listDead, limit, false)
}

// ListDeadBrief is ListDead with ID, Topic, Key and LastError cut in the
// database to their first BriefChars characters, and their full lengths in
// Bytes: reading many rows costs at most BriefChars characters a value,
// however long the values are.
func (s *Store) ListDeadBrief(ctx context.Context, limit int) ([]DeadRow, error) {
	return s.listDead(ctx, s.d.queries().listDeadBrief, limit, true)
}

func (s *Store) listDead(ctx context.Context, q string, limit int, brief bool) ([]DeadRow, error) {
	rows, err := s.pool.Query(ctx, q, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DeadRow
	created, dead := s.d.newTime(), s.d.newTime()
	for rows.Next() {
		var d DeadRow
		dest := []any{&d.Seq, &d.ID, &d.Topic, &d.Key, &d.Attempts, &d.LastError, created.dest(), dead.dest(), &d.Parked}
		if brief {
			dest = append(dest, &d.Bytes.ID, &d.Bytes.Topic, &d.Bytes.Key, &d.Bytes.LastError)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		d.CreatedAt, d.DeadAt = created.time(), dead.time()
		out = append(out, d)
	}
	return out, rows.Err()
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Backlog is the relay's periodic reading of the table (see the backlog
// query): the undelivered rows by disjoint state, the dead rows, and the
// age of the oldest row a claim could take now.
type Backlog struct {
	Pending, Retrying, Parked, Dead int64
	OldestClaimableAge              time.Duration
	// ParkedKeys is how many keys dead rows park; OldestPendingAge the age
	// of the oldest undelivered row that is not dead (parked ones too).
	ParkedKeys       int64
	OldestPendingAge time.Duration
	// Scheduled is how many of the Pending rows are scheduled and not yet
	// due (Message.DeliverAt).
	Scheduled int64
}

// Backlog runs the backlog query: one statement.
func (s *Store) Backlog(ctx context.Context) (Backlog, error) {
	q, args := s.d.backlog(time.Now())
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return Backlog{}, err
	}
	defer rows.Close()
	var b Backlog
	var age, pendingAge float64
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Backlog{}, err
		}
		return Backlog{}, txboxdriver.ErrNoRows
	}
	if err := rows.Scan(&b.Pending, &b.Retrying, &b.Parked, &b.Dead, &age, &b.ParkedKeys, &pendingAge, &b.Scheduled); err != nil {
		return Backlog{}, err
	}
	b.OldestClaimableAge = time.Duration(max(age, 0) * float64(time.Second))
	b.OldestPendingAge = time.Duration(max(pendingAge, 0) * float64(time.Second))
	return b, rows.Err()
}

// Ping runs a trivial query: whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, "SELECT 1")
	if err != nil {
		return err
	}
	return rows.Close()
}
