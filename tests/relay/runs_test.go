package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// runLog is a publisher that records, in the order they happen, every
// message sent ("key:n") and every answer, and fails the sends that fail
// says to fail. Several relays may share it.
type runLog struct {
	mu     sync.Mutex
	events []runEvent
	calls  [][]string // the payloads of each Publish call
	fail   func(payload string, attempt int) error
	tries  map[string]int
}

type runEvent struct {
	payload string
	acked   bool // false: the send; true: its acknowledgement
}

func newRunLog(fail func(payload string, attempt int) error) *runLog {
	return &runLog{fail: fail, tries: map[string]int{}}
}

func (l *runLog) Publish(_ context.Context, msgs []txbox.Message) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := make([]error, len(msgs))
	call := make([]string, len(msgs))
	for i, m := range msgs {
		p := string(m.Payload)
		call[i] = p
		l.events = append(l.events, runEvent{payload: p})
		l.tries[p]++
		if l.fail != nil {
			errs[i] = l.fail(p, l.tries[p])
		}
	}
	for i, p := range call {
		if errs[i] == nil {
			l.events = append(l.events, runEvent{payload: p, acked: true})
		}
	}
	l.calls = append(l.calls, call)
	return errs
}

// check fails t unless every key's messages 1..perKey were acknowledged
// exactly once each, in order, and no message of a key was sent before the
// key's previous message was acknowledged. It returns the calls.
func (l *runLog) check(t *testing.T, keys []string, perKey int) [][]string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	acked := map[string]int{} // key → last n acknowledged
	for _, e := range l.events {
		k, v, _ := strings.Cut(e.payload, ":")
		n, _ := strconv.Atoi(v)
		switch {
		case !e.acked && n > acked[k]+1:
			t.Fatalf("%s sent while %s:%d was not acknowledged yet", e.payload, k, n-1)
		case e.acked && n != acked[k]+1:
			t.Fatalf("%s acknowledged after %s:%d", e.payload, k, acked[k])
		case e.acked:
			acked[k] = n
		}
	}
	for _, k := range keys {
		if acked[k] != perKey {
			t.Fatalf("key %s: %d of %d messages acknowledged", k, acked[k], perKey)
		}
	}
	for _, c := range l.calls {
		seen := map[string]bool{}
		for _, p := range c {
			k, _, _ := strings.Cut(p, ":")
			if seen[k] {
				t.Fatalf("one Publish call held two messages of key %s: %v", k, c)
			}
			seen[k] = true
		}
	}
	return l.calls
}

// addKeyed queues perKey messages "key:n" of each key, interleaved, in one
// transaction.
func addKeyed(t *testing.T, f fixture, topic string, keys []string, perKey int) {
	var msgs []txbox.Message
	for n := 1; n <= perKey; n++ {
		for _, k := range keys {
			msgs = append(msgs, txbox.Message{Topic: topic, Key: k, Payload: []byte(fmt.Sprintf("%s:%d", k, n))})
		}
	}
	f.add(t, true, msgs...)
}

// A backlog of fewer keys than a batch drains in runs: each round takes
// several messages of a key, sent one after another, where one message per
// key per round would need at least perKey rounds.
func TestRunsDrainFewKeys(t *testing.T) {
	t.Parallel()
	const perKey = 60
	f := pgxFixture(t, 8)
	keys := []string{"a", "b", "c", "d", "e"}
	addKeyed(t, f, "runs.few", keys, perKey)
	log := newRunLog(nil)
	r := f.newRelay(t, log, relay.Config{BatchSize: 100, PollInterval: time.Hour, DisableNotify: true})
	startRelay(t, r)
	eventually(t, "every message published", func() bool { return testenv.RelayStats(r).Published == int64(len(keys)*perKey) })
	log.check(t, keys, perKey)
	// Rounds that claimed nothing wait an hour: all but the last one here
	// published something.
	if rounds := testenv.RelayStats(r).Rounds; rounds >= perKey {
		t.Fatalf("%d rounds for %d messages of %d keys: no runs (one message per key per round needs %d)", rounds, len(keys)*perKey, len(keys), perKey)
	}
	t.Logf("%d messages of %d keys in %d rounds", len(keys)*perKey, len(keys), testenv.RelayStats(r).Rounds)
}

// A message of a run that fails holds back the rest of its key's run, and
// only that: the key's later messages are sent only once it is acknowledged,
// and other keys' runs go on.
func TestRunsFailureHoldsBackItsKey(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"rejected", "transient"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const perKey = 30
			f := pgxFixture(t, 8)
			keys := []string{"a", "b"}
			addKeyed(t, f, "runs.fail", keys, perKey)
			log := newRunLog(func(p string, attempt int) error {
				if (p == "a:5" || p == "a:17") && attempt <= 2 {
					if kind == "rejected" {
						return txbox.Reject(errors.New("refused"))
					}
					return errors.New("broker hiccup")
				}
				return nil
			})
			r := f.newRelay(t, log, relaytest.With(relay.Config{BatchSize: 100, PollInterval: 2 * time.Millisecond, DisableNotify: true}, relaytest.Config{RetryDelay: time.Millisecond}))
			startRelay(t, r)
			eventually(t, "every message published", func() bool { return testenv.RelayStats(r).Published == int64(len(keys)*perKey) })
			calls := log.check(t, keys, perKey)
			// b's run went on while a waited: some call after a:5's first
			// failure sent b's messages without a's.
			log.mu.Lock()
			tries := log.tries["a:5"]
			log.mu.Unlock()
			if tries != 3 {
				t.Fatalf("a:5 sent %d times, want 3 (two failures)", tries)
			}
			if len(calls) >= 2*perKey {
				t.Fatalf("%d Publish calls", len(calls))
			}
		})
	}
}

// Several relays on a backlog of few keys: runs never put two messages of
// a key in flight at once, across relays, and every message goes once.
func TestRunsSeveralRelays(t *testing.T) {
	t.Parallel()
	const perKey = 200
	f := pgxFixture(t, 16)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	addKeyed(t, f, "runs.relays", keys, perKey)
	log := newRunLog(nil)
	var rs []*relay.Relay
	for i := 0; i < 3; i++ {
		r := f.newRelay(t, log, relay.Config{BatchSize: 50, PollInterval: time.Millisecond, DisableNotify: true})
		startRelay(t, r)
		rs = append(rs, r)
	}
	eventually(t, "every message published", func() bool {
		var n int64
		for _, r := range rs {
			n += testenv.RelayStats(r).Published
		}
		return n == int64(len(keys)*perKey)
	})
	log.check(t, keys, perKey)
}

// A row of a run that breaks the contract (headers that are not an object
// of strings, written by plain SQL) is dead at once; the rest of its key's
// run is not sent and then waits behind it (parked), while another key's
// run in the same batch goes out whole.
func TestRunsInvalidRowParksOnlyItsKey(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	ins := func(key, payload, headers string) {
		f.exec(t, "INSERT INTO txbox_outbox (topic, ordering_key, payload, headers) VALUES ('runs.bad', $1, $2, $3::jsonb)", key, []byte(payload), headers)
	}
	ins("a", "a:1", "{}")
	ins("b", "b:1", "{}")
	ins("a", "a:2", `{"n": 1}`)
	ins("b", "b:2", "{}")
	ins("a", "a:3", "{}")
	ins("b", "b:3", "{}")
	log := newRunLog(nil)
	r := f.newRelay(t, log, relay.Config{BatchSize: 100, PollInterval: 5 * time.Millisecond, DisableNotify: true})
	startRelay(t, r)
	eventually(t, "a:2 dead, a:3 parked, b delivered", func() bool {
		st, err := r.Stats(context.Background())
		return err == nil && st.DeadRows == 1 && st.Parked == 1 && testenv.RelayStats(r).Published == 4
	})
	log.check(t, []string{"b"}, 3)
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, e := range log.events {
		if strings.HasPrefix(e.payload, "a:") && e.payload != "a:1" {
			t.Fatalf("%s was sent; a:2 is invalid and a:3 waits behind it", e.payload)
		}
	}
}
