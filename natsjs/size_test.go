package natsjs

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
)

// testPublisher is a Publisher with the limits CheckMessage reads and no
// connection.
func testPublisher(maxPayload int64, maxLine int, ce string) *Publisher {
	p := &Publisher{prefix: "p.", replyLen: len("_INBOX.") + 13, ceSource: ce,
		maxPayload: func() int64 { return maxPayload }}
	p.maxLine.Store(int64(maxLine))
	return p
}

// TestFitsNeverAcceptsWhatTheMeasureRefuses draws messages around the
// payload and protocol line limits and checks that the cheap bound (fits)
// accepts only messages that the exact measure of the built message
// (checkSizes) accepts too, and that CheckMessage agrees with the exact
// measure on every one of them.
func TestFitsNeverAcceptsWhatTheMeasureRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 16))
	created := time.Date(2026, 12, 4, 8, 0, 0, 123, time.FixedZone("x", 3600))
	fitted, measured := 0, 0
	for i := range 20000 {
		m := txbox.Message{ID: strings.Repeat("i", rng.IntN(40)), Topic: "t" + strings.Repeat("x", rng.IntN(200)),
			Payload: make([]byte, rng.IntN(1200))}
		if rng.IntN(2) == 0 {
			m.Key = strings.Repeat("k", rng.IntN(30))
		}
		if rng.IntN(4) > 0 {
			m.CreatedAt = created.Add(time.Duration(rng.Int64N(1e15)))
		}
		if n := rng.IntN(4); n > 0 {
			m.Headers = map[string]string{}
			for j := range n {
				// Padded values (trimmed by nats.go), names equal but for
				// case, and reserved names (dropped).
				names := []string{"a", "A", "trace-" + strings.Repeat("n", j), "Nats-Msg-Id", "txbox-key"}
				m.Headers[names[rng.IntN(len(names))]] = strings.Repeat(" ", rng.IntN(3)) + strings.Repeat("v", rng.IntN(100))
			}
		}
		p := testPublisher(int64(600+rng.IntN(700)), 40+rng.IntN(300), "")
		subj := p.prefix + m.Topic
		exact := p.checkSizes(m, subj)
		if p.fits(m, len(subj)) {
			fitted++
			if exact != nil {
				t.Fatalf("message %d: fits, but the built message is refused: %v", i, exact)
			}
		} else {
			measured++
		}
		if got := p.CheckMessage(m); (got == nil) != (exact == nil) {
			t.Fatalf("message %d: CheckMessage says %v, the exact measure %v", i, got, exact)
		}
	}
	if fitted == 0 || measured == 0 {
		t.Fatalf("the draw missed a side: %d fitted, %d measured", fitted, measured)
	}
}

// TestCheckMessageAllocatesNothing guards the relay's per-message cost: a
// message well within the limits is checked without an allocation, and
// built with at most six (the message and its subject, the header map's
// two, one array for the values, the created-at text).
func TestCheckMessageAllocatesNothing(t *testing.T) {
	p := testPublisher(1<<20, DefaultMaxControlLine, "")
	m := txbox.Message{ID: "0193a6e2-8f7a-7cde-9a3b-5f2e1d0c4b3a", Topic: "orders.created", Key: "customer-42",
		Payload: []byte(`{"order":1}`), CreatedAt: time.Now(),
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}}
	if a := testing.AllocsPerRun(200, func() {
		if err := p.CheckMessage(m); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("CheckMessage: %v allocations, want 0", a)
	}
	if a := testing.AllocsPerRun(200, func() { _ = p.Msg(m) }); a > 6 {
		t.Errorf("Msg: %v allocations, want at most 6", a)
	}
}
