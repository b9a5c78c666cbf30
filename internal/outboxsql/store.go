package outboxsql

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/txbox/txbox/driver"
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
}

// Rejection records a broker's refusal of one claimed row.
type Rejection struct {
	Seq        int64
	Err        string
	RetryAfter time.Duration // until the next attempt
	Dead       bool          // computed by the store from MaxAttempts
}

// Store runs the relay's SQL on one outbox table.
type Store struct {
	dialect driver.Dialect
	pool    driver.Pool
	q       queries
	lease   time.Duration
	// mark names the query that marks published rows: mark_published,
	// or delete_published when delivered rows are not kept.
	mark string
}

// NewStore returns a Store for the quoted table; lease is how long a SQLite
// claim holds before another relay may take the rows (PostgreSQL and MySQL
// hold row locks instead and ignore it).
func NewStore(d driver.Dialect, pool driver.Pool, table string, lease time.Duration) (*Store, error) {
	q, err := loadQueries(d, table)
	if err != nil {
		return nil, err
	}
	return &Store{dialect: d, pool: pool, q: q, lease: lease, mark: "mark_published"}, nil
}

// DeletePublished makes Finish delete published rows, in the transaction
// that would have marked them, instead of keeping them for cleanup.
func (s *Store) DeletePublished() { s.mark = "delete_published" }

// Batch is a claim on some rows, ended by Finish or Release.
type Batch struct {
	Rows  []Claimed
	s     *Store
	tx    driver.Tx // PostgreSQL, MySQL: the transaction holding the row locks
	token string    // SQLite: the lease token
}

// Claim takes up to limit deliverable rows with ids from from on, oldest
// first. An empty batch still needs Release. from 0 looks at every row; a
// higher from spares the scan the entries of rows delivered since the
// table was last vacuumed, but misses rows below it (a transaction that
// commits out of id order, a retry that came due), so callers must scan
// from 0 regularly.
func (s *Store) Claim(ctx context.Context, limit int, from int64) (*Batch, error) {
	switch s.dialect {
	case driver.Postgres, driver.MySQL:
		// The transaction must outlive ctx: database/sql rolls a transaction
		// back when its context ends, and a relay that is stopping still
		// marks what the broker acknowledged.
		tx, err := s.pool.Begin(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		if s.dialect == driver.MySQL {
			if err := readCommitted(ctx, tx); err != nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
				return nil, err
			}
		}
		args := []any{limit, from}
		if s.dialect == driver.MySQL {
			args = []any{from, limit}
		}
		rows, err := tx.Query(ctx, s.q["claim"], args...)
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, err
		}
		claimed, err := scanClaimed(rows, s.dialect, limit)
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, err
		}
		return &Batch{Rows: claimed, s: s, tx: tx}, nil
	case driver.SQLite:
		token := newToken()
		now := time.Now()
		rows, err := s.pool.Query(ctx, s.q["claim"], token, now.Add(s.lease).UnixMicro(), now.UnixMicro(), limit, from)
		if err != nil {
			return nil, err
		}
		claimed, err := scanClaimed(rows, s.dialect, limit)
		if err != nil {
			// The UPDATE may have committed: release what it took.
			_, _ = s.pool.Exec(context.WithoutCancel(ctx), s.q["release"], token)
			return nil, err
		}
		slices.SortFunc(claimed, func(a, b Claimed) int { return int(a.Seq - b.Seq) })
		return &Batch{Rows: claimed, s: s, token: token}, nil
	}
	return nil, fmt.Errorf("txbox: relay does not support dialect %q", s.dialect)
}

// readCommitted turns tx, just begun on MySQL, into a READ COMMITTED
// transaction on the same connection. Under REPEATABLE READ (InnoDB's
// default) the claim's scan takes gap locks at the end of the pending range,
// right where writers insert new rows: writers would wait for a relay's
// publish, and deadlock with its marks. READ COMMITTED takes no gap locks.
// driver.Pool.Begin takes no isolation level, and SET TRANSACTION is refused
// inside a transaction, so the empty transaction is committed and a new one
// started; the later Commit or Rollback ends that one. The connection's own
// default level is left as it was.
func readCommitted(ctx context.Context, tx driver.Tx) error {
	for _, q := range []string{"COMMIT", "SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "START TRANSACTION"} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("claim transaction: %s: %w", q, err)
		}
	}
	return nil
}

func scanClaimed(rows driver.Rows, d driver.Dialect, limit int) ([]Claimed, error) {
	defer rows.Close()
	out := make([]Claimed, 0, min(limit, 4096))
	// One row's destinations, reused for every row: the claim is the
	// relay's hot path, and a batch may hold thousands of rows.
	var (
		c      Claimed
		micros int64 // SQLite stores created_at as Unix microseconds
		mt     anyTime
		pt     time.Time
	)
	dest := []any{&c.Seq, &c.ID, &c.Topic, &c.Key, &c.Payload, &c.Headers, &c.Attempts, &pt}
	switch d {
	case driver.SQLite:
		dest[7] = &micros
	case driver.MySQL:
		dest[7] = &mt
	}
	for rows.Next() {
		c = Claimed{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		switch d {
		case driver.SQLite:
			c.CreatedAt = time.UnixMicro(micros)
		case driver.MySQL:
			c.CreatedAt = mt.Time
		default:
			c.CreatedAt = pt
		}
		out = append(out, c)
	}
	return out, rows.Err()
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
// PostgreSQL a batch without ordering keys commits without waiting for the
// disk (see lazy_commit in sql/postgres.sql).
func (b *Batch) Finish(ctx context.Context, published []int64, rejected []Rejection, maxAttempts int) error {
	s := b.s
	switch s.dialect {
	case driver.Postgres, driver.MySQL:
		if len(published) > 0 {
			q, args := s.withIDs(s.mark, published)
			if _, err := b.tx.Exec(ctx, q, args...); err != nil {
				_ = b.tx.Rollback(context.WithoutCancel(ctx))
				return fmt.Errorf("mark published: %w", err)
			}
		}
		for _, r := range rejected {
			args := []any{r.Seq, r.Err, r.RetryAfter.Milliseconds(), maxAttempts}
			if s.dialect == driver.MySQL {
				args = []any{maxAttempts, r.Err, r.RetryAfter.Microseconds(), r.Seq}
			}
			if _, err := b.tx.Exec(ctx, s.q["reject"], args...); err != nil {
				_ = b.tx.Rollback(context.WithoutCancel(ctx))
				return fmt.Errorf("record rejection: %w", err)
			}
		}
		if q, ok := s.q["lazy_commit"]; ok && !b.Keyed() {
			if _, err := b.tx.Exec(ctx, q); err != nil {
				_ = b.tx.Rollback(context.WithoutCancel(ctx))
				return fmt.Errorf("lazy commit: %w", err)
			}
		}
		if err := b.tx.Commit(ctx); err != nil {
			return fmt.Errorf("commit marks: %w", err)
		}
		return nil
	case driver.SQLite:
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		now := time.Now()
		if len(published) > 0 {
			args := []any{now.UnixMicro(), b.token, s.idsArg(published)}
			if s.mark == "delete_published" {
				args = args[1:]
			}
			if _, err := tx.Exec(ctx, s.q[s.mark], args...); err != nil {
				return fmt.Errorf("mark published: %w", err)
			}
		}
		for _, r := range rejected {
			if _, err := tx.Exec(ctx, s.q["reject"], r.Seq, r.Err, now.Add(r.RetryAfter).UnixMicro(), maxAttempts, now.UnixMicro(), b.token); err != nil {
				return fmt.Errorf("record rejection: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, s.q["release"], b.token); err != nil {
			return fmt.Errorf("release claim: %w", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("commit marks: %w", err)
		}
		return nil
	}
	return errors.ErrUnsupported
}

// Release gives every claimed row back without marking any.
func (b *Batch) Release(ctx context.Context) error {
	if b.tx != nil {
		return b.tx.Rollback(ctx)
	}
	_, err := b.s.pool.Exec(ctx, b.s.q["release"], b.token)
	return err
}

// Cleanup deletes up to limit rows published before cutoff and returns how
// many it deleted.
func (s *Store) Cleanup(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	if s.dialect == driver.MySQL {
		return s.pool.Exec(ctx, s.q["cleanup"], max(time.Since(cutoff), 0).Microseconds(), limit)
	}
	return s.pool.Exec(ctx, s.q["cleanup"], s.timeArg(cutoff), limit)
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
	var args []any
	if s.dialect == driver.SQLite {
		args = append(args, time.Now().UnixMicro())
	}
	rows, err := s.pool.Query(ctx, s.q["counts"], args...)
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
		return Counts{}, driver.ErrNoRows
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
}

// ListDead returns up to limit dead rows, oldest first.
func (s *Store) ListDead(ctx context.Context, limit int) ([]DeadRow, error) {
	rows, err := s.pool.Query(ctx, s.q["list_dead"], limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DeadRow
	for rows.Next() {
		var d DeadRow
		if s.dialect == driver.SQLite {
			var created, dead int64
			if err := rows.Scan(&d.Seq, &d.ID, &d.Topic, &d.Key, &d.Attempts, &d.LastError, &created, &dead, &d.Parked); err != nil {
				return nil, err
			}
			d.CreatedAt, d.DeadAt = time.UnixMicro(created), time.UnixMicro(dead)
		} else if s.dialect == driver.MySQL {
			var created, dead anyTime
			if err := rows.Scan(&d.Seq, &d.ID, &d.Topic, &d.Key, &d.Attempts, &d.LastError, &created, &dead, &d.Parked); err != nil {
				return nil, err
			}
			d.CreatedAt, d.DeadAt = created.Time, dead.Time
		} else if err := rows.Scan(&d.Seq, &d.ID, &d.Topic, &d.Key, &d.Attempts, &d.LastError, &d.CreatedAt, &d.DeadAt, &d.Parked); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// Redrive makes dead rows pending again with a fresh attempt budget; no
// seqs means every dead row. It returns how many rows it changed.
func (s *Store) Redrive(ctx context.Context, seqs []int64) (int64, error) {
	if len(seqs) == 0 {
		return s.pool.Exec(ctx, s.q["redrive_all"])
	}
	q, args := s.withIDs("redrive", seqs)
	return s.pool.Exec(ctx, q, args...)
}

// Discard deletes dead rows, releasing the keys they parked; no seqs means
// every dead row. It returns how many rows it deleted.
func (s *Store) Discard(ctx context.Context, seqs []int64) (int64, error) {
	if len(seqs) == 0 {
		return s.pool.Exec(ctx, s.q["discard_all"])
	}
	q, args := s.withIDs("discard", seqs)
	return s.pool.Exec(ctx, q, args...)
}

// withIDs returns query name and its arguments for the list of ids seqs:
// one array argument on PostgreSQL, a JSON array on SQLite, and on MySQL
// one placeholder per id in place of {{ids}}.
func (s *Store) withIDs(name string, seqs []int64) (string, []any) {
	if s.dialect != driver.MySQL {
		return s.q[name], []any{s.idsArg(seqs)}
	}
	args := make([]any, len(seqs))
	for i, v := range seqs {
		args[i] = v
	}
	return strings.Replace(s.q[name], "{{ids}}", strings.TrimSuffix(strings.Repeat("?,", len(seqs)), ","), 1), args
}

// anyTime scans a timestamp whether the driver returns a time.Time or text
// (go-sql-driver/mysql without parseTime=true returns DATETIME as bytes).
type anyTime struct{ time.Time }

func (t *anyTime) Scan(v any) error {
	switch x := v.(type) {
	case time.Time:
		t.Time = x
		return nil
	case nil:
		t.Time = time.Time{}
		return nil
	case []byte:
		return t.parse(string(x))
	case string:
		return t.parse(x)
	}
	return fmt.Errorf("txbox: cannot scan %T as a time", v)
}

func (t *anyTime) parse(s string) error {
	p, err := time.ParseInLocation("2006-01-02 15:04:05.999999", s, time.UTC)
	if err != nil {
		return fmt.Errorf("txbox: cannot parse time %q: %w", s, err)
	}
	t.Time = p
	return nil
}

func (s *Store) idsArg(seqs []int64) any {
	if s.dialect == driver.SQLite {
		b, _ := json.Marshal(seqs)
		return string(b)
	}
	return seqs
}

func (s *Store) timeArg(t time.Time) any {
	if s.dialect == driver.SQLite {
		return t.UnixMicro()
	}
	return t
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
