package relay_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox/relay"
)

// A relay without lanes stalls between its claim and its publish past its
// claim lease: the server ends its claim transaction, a second relay takes
// the rows over and delivers every key in order. When the stalled relay
// wakes it does not send the batch it claimed (it is older than its lease):
// no message reaches the broker twice, none after its successor.
func TestStalledRelayWithoutLanesSendsNothingStale(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	log := &sendLog{}
	cfg := relay.Config{PublishTimeout: 300 * time.Millisecond, ClaimLease: time.Second, BatchSize: 20, PollInterval: 5 * time.Millisecond}
	adder := &keyedAdder{f: f}
	for range 10 {
		keys := make([]string, 30)
		for k := range keys {
			keys[k] = "k" + strconv.Itoa(k)
		}
		adder.add(t, keys...)
	}
	aPub := &stallingPublisher{logPublisher: &logPublisher{name: "a", log: log}}
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
	eventually(t, "a's stale round over", func() bool { return a.Counters().FailedRounds >= 1 })

	calls := log.snapshot()
	next := map[string]int{}
	for _, c := range calls {
		for _, p := range c.payloads {
			key, v, _ := strings.Cut(p, ":")
			n, _ := strconv.Atoi(v)
			if n != next[key]+1 {
				t.Fatalf("key %s: message %d sent by %s after message %d", key, n, c.relay, next[key])
			}
			next[key] = n
		}
	}
	for key, n := range adder.want() {
		if next[key] != n {
			t.Fatalf("key %s: %d of %d messages sent", key, next[key], n)
		}
	}
	if n := log.sentBy("a"); n != 0 {
		t.Fatalf("the stalled relay sent %d messages, want none", n)
	}
}
