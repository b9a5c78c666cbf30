package outboxsql

import (
	"math"
	"testing"
)

// bindInts writes integers only, all of them or none.
func TestBindInts(t *testing.T) {
	for _, c := range []struct {
		q, want string
		args    []any
		kept    int // args returned
	}{
		{"SELECT ? WHERE id IN (?,?) LIMIT ?", "SELECT -1 WHERE id IN (9223372036854775807,7) LIMIT 100", []any{int16(-1), int64(math.MaxInt64), int64(7), 100}, 0},
		{"SELECT ? WHERE owner = ?", "SELECT ? WHERE owner = ?", []any{int16(3), "relay'; DROP TABLE x; --"}, 2},
		{"SELECT ?", "SELECT ?", []any{1, 2}, 2},
		{"SELECT ?, ?", "SELECT ?, ?", []any{1}, 1},
		{"SELECT 1", "SELECT 1", nil, 0},
	} {
		q, args := bindInts(c.q, c.args)
		if q != c.want || len(args) != c.kept {
			t.Errorf("bindInts(%q, %v) = %q, %v; want %q and %d args", c.q, c.args, q, args, c.want, c.kept)
		}
	}
}
