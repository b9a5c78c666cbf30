package wire

import (
	"testing"
	"time"
)

// FuzzTime checks Time against time.Format with Layout, the years that
// time.Format writes otherwise included.
func FuzzTime(f *testing.F) {
	for _, s := range []int64{0, 1, -1, 1733353200123456789, -62135596800, 253402300799, 253402300800, -62167219200, -62167219201} {
		f.Add(s, int64(0))
		f.Add(s, int64(999999999))
	}
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("x", 3600*5+1800))
		want := tm.UTC().Format(Layout)
		if tm.IsZero() {
			want = ""
		}
		if got := Time(tm); got != want {
			t.Fatalf("Time(%v) = %q, want %q", tm, got, want)
		}
	})
}

func BenchmarkTime(b *testing.B) {
	t := time.Date(2026, 12, 4, 21, 30, 5, 123456789, time.UTC)
	for b.Loop() {
		_ = Time(t)
	}
}
