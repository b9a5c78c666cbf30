package wire

import (
	"net/url"
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

// PercentEncode follows the NATS binding's example and encodes exactly
// space, '"', '%' and the bytes outside printable ASCII; one round of
// percent-decoding gives the value back.
func TestPercentEncode(t *testing.T) {
	for in, want := range map[string]string{
		"Euro € 😀":              "Euro%20%E2%82%AC%20%F0%9F%98%80",
		"ce-%41-é":              "ce-%2541-%C3%A9",
		`ce id "quoted"`:        "ce%20id%20%22quoted%22",
		"/shop/orders":          "/shop/orders",
		"a\tb\x7f":              "a%09b%7F",
		"!#$&'()*+,-./:;<=>?@~": "!#$&'()*+,-./:;<=>?@~",
		"":                      "",
	} {
		got := PercentEncode(in)
		if got != want {
			t.Errorf("PercentEncode(%q) = %q, want %q", in, got, want)
		}
		if back, err := url.PathUnescape(got); err != nil || back != in {
			t.Errorf("PathUnescape(%q) = %q, %v; want %q", got, back, err, in)
		}
	}
}

func FuzzPercentEncode(f *testing.F) {
	f.Add("Euro € 😀")
	f.Add("%%\"")
	f.Fuzz(func(t *testing.T, s string) {
		e := PercentEncode(s)
		for i := 0; i < len(e); i++ {
			if c := e[i]; c <= ' ' || c >= 0x7f || c == '"' {
				t.Fatalf("PercentEncode(%q) = %q holds %#x", s, e, c)
			}
		}
		if back, err := url.PathUnescape(e); err != nil || back != s {
			t.Fatalf("PathUnescape(PercentEncode(%q)) = %q, %v", s, back, err)
		}
	})
}
