package relay_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// A relay stalls between its claim and its publish past its claim lease,
// holding a batch of rows without a key (which no lane lease fences): the
// server ends its claim transaction, a second relay takes the rows over and
// delivers them. When the stalled relay wakes it does not send the batch it
// claimed (it is older than its lease): no message reaches the broker twice.
// (Keyed rows stay with their lane's owner: TestLanesStalledRelayPastItsLease.)
func TestStalledRelayWithoutLanesSendsNothingStale(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	log := &sendLog{}
	// One batch holds every row. a's rounds beside the stalled one (a relay
	// whose claim found rows claims again while that batch is out) stall
	// with it (stallingAll).
	cfg := relaytest.With(relay.Config{PublishTimeout: 300 * time.Millisecond, BatchSize: 500, PollInterval: 5 * time.Millisecond}, relaytest.Config{ClaimLease: time.Second})
	const n = 300
	msgs := make([]txbox.Message, n)
	for i := range msgs {
		msgs[i] = txbox.Message{Topic: "lanes.t", Payload: []byte("u:" + strconv.Itoa(i+1))}
	}
	f.add(t, true, msgs...)
	aPub := &stallingAll{logPublisher: &logPublisher{name: "a", log: log}}
	var b *relay.Relay
	aPub.stall = func() {
		// a holds its first batch, claimed and not yet sent: b takes
		// every row over once the server has ended a's claim.
		startRelay(t, b)
		untilDrained(t, "b delivers everything", func() int64 { return f.count(t, "published_at IS NULL") })
	}
	aPub.armed.Store(true)
	a := f.newRelay(t, aPub, cfg)
	b = f.newRelay(t, &logPublisher{name: "b", log: log}, cfg)
	startRelay(t, a)
	eventually(t, "a stalled and woke", func() bool { return !aPub.armed.Load() })
	eventually(t, "a's stale round over", func() bool { return testenv.RelayStats(a).FailedRounds >= 1 })

	sent := map[string]int{}
	for _, c := range log.snapshot() {
		for _, p := range c.payloads {
			sent[p]++
		}
	}
	for i := range n {
		if p := "u:" + strconv.Itoa(i+1); sent[p] != 1 {
			t.Fatalf("%s sent %d times, want once", p, sent[p])
		}
	}
	if n := log.sentBy("a"); n != 0 {
		t.Fatalf("the stalled relay sent %d messages, want none", n)
	}
}

// stallingAll stalls the first message it checks, as stallingPublisher
// does, and every other until that stall is over: every round of the
// relay in flight meanwhile stalls with the first.
type stallingAll struct {
	*logPublisher
	armed atomic.Bool
	once  sync.Once
	stall func()
}

func (p *stallingAll) CheckMessage(txbox.Message) error {
	if p.armed.Load() {
		p.once.Do(func() {
			p.stall()
			p.armed.Store(false)
		})
	}
	return nil
}
