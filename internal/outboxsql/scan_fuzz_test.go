package outboxsql

import (
	"database/sql"
	"strings"
	"testing"
	"time"
)

// fuzzColumnValue is the value a driver hands Scan for a column a plain-SQL
// writer filled: SQLite's dynamic types (integer, real, text, blob, NULL)
// and what MySQL and PostgreSQL drivers return (time.Time, text as bytes).
func fuzzColumnValue(kind uint8, n int64, f float64, s string) any {
	switch kind % 8 {
	case 0:
		return n
	case 1:
		return f
	case 2:
		return s
	case 3:
		return []byte(s)
	case 4:
		return nil
	case 5:
		return time.Unix(n%(1<<40), 0).UTC()
	case 6:
		return n%2 == 0
	}
	return int32(n)
}

// FuzzScanColumns feeds the scan destinations of the claimed row's
// attempts and created_at columns (dynamicInt and microsTime on SQLite,
// anyTime on MySQL) any value a writer could have stored. The properties:
// Scan never panics and never fails the whole claim for dynamicInt and
// microsTime (the row is marked invalid instead: err is set exactly when
// the value is not an integer, and its text is short whatever the value);
// anyTime takes a time.Time as it is, NULL as the zero time, text only in
// MySQL's DATETIME form, and fails otherwise.
func FuzzScanColumns(f *testing.F) {
	f.Add(uint8(0), int64(3), 0.0, "")
	f.Add(uint8(1), int64(0), 1.5, "")
	f.Add(uint8(2), int64(0), 0.0, "3")
	f.Add(uint8(3), int64(0), 0.0, "2024-01-02 03:04:05.123456")
	f.Add(uint8(2), int64(0), 0.0, "2024-01-02 03:04:05")
	f.Add(uint8(2), int64(0), 0.0, "2024-02-30 25:61:61")
	f.Add(uint8(2), int64(0), 0.0, "0000-00-00 00:00:00")
	f.Add(uint8(3), int64(0), 0.0, strings.Repeat("\xff", 100))
	f.Add(uint8(4), int64(0), 0.0, "")
	f.Add(uint8(5), int64(-1<<62), 0.0, "")
	f.Add(uint8(6), int64(1), 0.0, "")
	f.Add(uint8(7), int64(1<<40), 0.0, "")
	f.Fuzz(func(t *testing.T, kind uint8, n int64, fl float64, s string) {
		v := fuzzColumnValue(kind, n, fl, s)
		var di dynamicInt
		var _ sql.Scanner = &di
		if err := di.Scan(v); err != nil {
			t.Fatalf("dynamicInt.Scan(%#v) failed the claim: %v", v, err)
		}
		x, isInt := v.(int64)
		if (di.err() == nil) != isInt || (isInt && int64(di.n) != x) {
			t.Fatalf("dynamicInt.Scan(%#v): n %d, err %v", v, di.n, di.err())
		}
		if di.err() != nil && len(di.err().Error()) > 200 {
			t.Fatalf("an error of %d bytes for %T", len(di.err().Error()), v)
		}
		var mt microsTime
		if err := mt.dest().(sql.Scanner).Scan(v); err != nil || (mt.err() == nil) != isInt {
			t.Fatalf("microsTime.Scan(%#v): %v, %v", v, err, mt.err())
		}
		if isInt && mt.time().UnixMicro() != x {
			t.Fatalf("microsTime of %d is %v", x, mt.time())
		}
		var at anyTime
		err := at.Scan(v)
		switch x := v.(type) {
		case time.Time:
			if err != nil || !at.time().Equal(x) {
				t.Fatalf("anyTime.Scan(%v) = %v, %v", x, at.time(), err)
			}
		case nil:
			if err != nil || !at.time().IsZero() {
				t.Fatalf("anyTime.Scan(nil) = %v, %v", at.time(), err)
			}
		case string, []byte:
			text := s
			if err == nil {
				if at.time().Location() != time.UTC {
					t.Fatalf("anyTime.Scan(%q) in %v", text, at.time().Location())
				}
				if _, perr := time.Parse("2006-01-02 15:04:05.999999", text); perr != nil {
					t.Fatalf("anyTime.Scan(%q) accepted text not in DATETIME form", text)
				}
			}
		default:
			if err == nil {
				t.Fatalf("anyTime.Scan(%#v) accepted it", v)
			}
		}
	})
}
