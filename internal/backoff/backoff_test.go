package backoff

import (
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	t.Parallel()
	const first, max = 100 * time.Millisecond, time.Second
	var got []time.Duration
	for d := time.Duration(0); len(got) < 6; {
		d = Next(d, first, max)
		got = append(got, d)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Next sequence %v, want %v", got, want)
		}
	}
}

func TestNth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		base, max time.Duration
		n         int
		want      time.Duration
	}{
		{time.Second, 5 * time.Minute, 0, time.Second},
		{time.Second, 5 * time.Minute, 1, time.Second},
		{time.Second, 5 * time.Minute, 2, 2 * time.Second},
		{time.Second, 5 * time.Minute, 4, 8 * time.Second},
		{time.Second, 5 * time.Minute, 9, 256 * time.Second},
		{time.Second, 5 * time.Minute, 10, 5 * time.Minute},
		{time.Second, 5 * time.Minute, 1 << 30, 5 * time.Minute},
		{10 * time.Minute, 5 * time.Minute, 1, 5 * time.Minute},
		{0, time.Second, 3, 0},
	} {
		if got := Nth(c.base, c.max, c.n); got != c.want {
			t.Errorf("Nth(%s, %s, %d) = %s, want %s", c.base, c.max, c.n, got, c.want)
		}
	}
}
