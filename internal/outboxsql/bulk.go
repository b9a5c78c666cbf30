package outboxsql

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/txbox/txbox/txboxdriver"
)

// Refusal is a dead row that a bulk action left as it was: the database
// refused the statement on this row alone (a check constraint, a trigger).
type Refusal struct {
	Seq int64
	Err error
}

// bulkChunk bounds the rows of one statement when a bulk action goes row
// group by row group (MySQL binds one parameter per row).
const bulkChunk = 1000

// Redrive makes dead rows pending again with a fresh attempt budget; no
// seqs means every dead row. It returns how many rows it changed and the
// rows the database refused (see bulk).
func (s *Store) Redrive(ctx context.Context, seqs []int64) (int64, []Refusal, error) {
	q := s.d.queries()
	return s.bulk(ctx, q.redrive, q.redriveAll, seqs)
}

// Discard deletes dead rows, releasing the keys they parked; no seqs means
// every dead row. It returns how many rows it deleted and the rows the
// database refused (see bulk).
func (s *Store) Discard(ctx context.Context, seqs []int64) (int64, []Refusal, error) {
	q := s.d.queries()
	return s.bulk(ctx, q.discard, q.discardAll, seqs)
}

// bulk runs some on the rows seqs, or all when seqs is empty, so that one
// row the database refuses does not stop the others. It first runs one
// statement on every row (on up to bulkChunk of the seqs given). When that fails on a row (rowError), it halves
// the rows and runs the statement on each half, and so on down to the rows
// that fail alone, which it returns as refused: k refused rows among n
// cost about 2k·log2(n) statements, and none when every row is accepted.
// An error that is not a row's (the connection, the context) ends the
// action with what was done so far.
func (s *Store) bulk(ctx context.Context, some, all string, seqs []int64) (int64, []Refusal, error) {
	if len(seqs) == 0 {
		n, err := s.pool.Exec(ctx, all)
		if err == nil || !rowError(err) || ctx.Err() != nil {
			return n, nil, err
		}
		if seqs, err = s.deadIDs(ctx); err != nil {
			return 0, nil, err
		}
	} else {
		seqs = slices.Clone(seqs)
		slices.Sort(seqs)
		seqs = slices.Compact(seqs)
	}
	var done int64
	var refused []Refusal
	var try func(ids []int64) error
	try = func(ids []int64) error {
		if len(ids) <= bulkChunk {
			q, args := s.d.withIDs(some, ids)
			n, err := s.pool.Exec(ctx, q, args...)
			if err == nil {
				done += n
				return nil
			}
			if !rowError(err) || ctx.Err() != nil {
				return err
			}
			if len(ids) == 1 {
				refused = append(refused, Refusal{Seq: ids[0], Err: err})
				return nil
			}
		}
		h := len(ids) / 2
		if err := try(ids[:h]); err != nil {
			return err
		}
		return try(ids[h:])
	}
	for c := range slices.Chunk(seqs, bulkChunk) {
		if err := try(c); err != nil {
			return done, refused, err
		}
	}
	return done, refused, nil
}

// deadIDs returns the seqs of every dead row, in order.
func (s *Store) deadIDs(ctx context.Context) ([]int64, error) {
	rows, err := s.pool.Query(ctx, s.d.queries().deadIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// mysqlError reads go-sql-driver's "Error 3819 (HY000): …".
var mysqlError = regexp.MustCompile(`^Error (\d+)(?: \(([0-9A-Z]{5})\))?: `)

// rowError reports whether err is the database refusing a statement for
// the data of a row it touches, so that the same statement on other rows
// may succeed: a constraint or a trigger, rather than the connection, the
// server, a lock or a permission. An SQLSTATE: what txboxdriver.IsRejected
// accepts (PostgreSQL). SQLite: SQLITE_CONSTRAINT
// (a CHECK, a trigger's RAISE(ABORT), a foreign key), SQLITE_MISMATCH.
// MySQL and MariaDB: SQLSTATE class 22, 23 or 45 (SIGNAL), and 3819 (a
// CHECK violated, MySQL's HY000).
func rowError(err error) bool {
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		return txboxdriver.IsRejected(err)
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		const sqliteConstraint, sqliteMismatch = 19, 20
		c := coded.Code() & 0xff
		return c == sqliteConstraint || c == sqliteMismatch
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if m := mysqlError.FindStringSubmatch(e.Error()); m != nil {
			num, _ := strconv.Atoi(m[1])
			c := m[2]
			return num == 3819 || strings.HasPrefix(c, "22") || strings.HasPrefix(c, "23") || strings.HasPrefix(c, "45")
		}
	}
	return false
}
