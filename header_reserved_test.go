package txbox

import (
	"slices"
	"strings"
	"testing"
)

// FuzzReservedASCII checks the allocation-free comparison against the
// lower-casing one it stands in for.
func FuzzReservedASCII(f *testing.F) {
	for _, s := range []string{"Nats-Msg-Id", "nats-", "NATS", "Txbox-Key", "txbox", "Txbox-Claim-Check", "Message-ID", "message_id", "MessageId", "messageidx", "a", "", "Content-Type"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		r, ok := reservedASCII(name)
		if !ok {
			return
		}
		l := strings.ToLower(name)
		want := slices.Contains(reservedHeaders, l)
		for _, p := range reservedHeaderPrefixes {
			want = want || strings.HasPrefix(l, p)
		}
		want = want && l != claimCheckLower
		if r != want {
			t.Fatalf("%q: reserved %v, want %v", name, r, want)
		}
	})
}

// BenchmarkIsReservedHeader: the relay asks it of every header of every
// message it relays.
func BenchmarkIsReservedHeader(b *testing.B) {
	names := []string{"Content-Type", "traceparent", "X-Tenant", "Nats-Msg-Id"}
	for b.Loop() {
		for _, n := range names {
			_ = IsReservedHeader(n)
		}
	}
}

// TestClaimCheckHeaderNotReserved: HeaderClaimCheck, in any case, is the
// one Txbox-* name a row carries; its neighbours stay reserved.
func TestClaimCheckHeaderNotReserved(t *testing.T) {
	for _, n := range []string{HeaderClaimCheck, "txbox-claim-check", "TXBOX-CLAIM-CHECK"} {
		if IsReservedHeader(n) {
			t.Errorf("%q is reserved", n)
		}
		m := Message{Topic: "t", Headers: map[string]string{n: "ref"}}
		if err := m.Validate(0); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"Txbox-Claim-Checks", "Txbox-Claim", "Txbox-Claim-Check-Size", "Txbox-Claim-Checß"} {
		if !IsReservedHeader(n) {
			t.Errorf("%q is not reserved", n)
		}
	}
}
