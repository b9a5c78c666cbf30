package crash_test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/txbox/txbox/tests/crash/internal/crashdb"
)

// ledger is a scenario's account, built at the end from the database (what
// the producer committed, what the consumer applied, what the outbox still
// holds) and from a full read of the stream.
type ledger struct {
	scenario         string
	seed             uint64
	faulting, drain  time.Duration
	faults           []fault
	exits            int // processes that exited by themselves
	committed        int
	effects          int
	inStream         int             // distinct messages in the stream
	streamDuplicates int             // stream messages beyond the first of their id
	deadLetters      int             // in the consumer's dead-letter stream
	latency          []time.Duration // per applied message: its commit to its first effect

	lost            int // committed, never applied
	notInStream     int // committed, never published
	phantom         int // applied or published, never committed
	double          int // effects beyond the first of a message
	orderViolations int // a key's effect applied while its previous version was not (or after a later one)
	streamOrder     int // a key's version first published after a later version of it
	stuck           int // outbox rows still pending at the end
	dead            int // outbox rows parked as dead
	examples        []string
}

func (e *env) buildLedger(stream []streamMsg, deadLetters int) *ledger {
	t := e.t
	l := &ledger{deadLetters: deadLetters}
	committed := map[string]bool{}
	rows, err := e.ledger.Query("SELECT msg_id FROM crash_orders")
	if err != nil {
		t.Fatalf("read crash_orders: %v", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		committed[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	l.committed = len(committed)
	l.latency = e.commitToEffect()

	applied := map[string]int{}
	last := map[string]int{} // key → version of its last first-time effect
	rows, err = e.ledger.Query("SELECT key, version, msg_id FROM crash_effects ORDER BY id")
	if err != nil {
		t.Fatalf("read crash_effects: %v", err)
	}
	for rows.Next() {
		var key, id string
		var version int
		if err := rows.Scan(&key, &version, &id); err != nil {
			t.Fatal(err)
		}
		l.effects++
		applied[id]++
		if applied[id] > 1 {
			l.double++
			l.example("double effect of %s", id)
			continue
		}
		if !committed[id] {
			l.phantom++
			l.example("phantom effect %s", id)
		}
		if version != last[key]+1 {
			l.orderViolations++
			l.example("key %s: version %d applied after version %d", key, version, last[key])
		}
		last[key] = max(last[key], version)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	published := map[string]bool{}
	highest := map[string]int{}
	for _, m := range stream {
		if published[m.id] {
			l.streamDuplicates++
			continue
		}
		published[m.id] = true
		if !committed[m.id] {
			l.phantom++
			l.example("phantom in stream: %q (seq %d)", m.id, m.seq)
			continue
		}
		key, version, _ := crashdb.ParseMsgID(m.id)
		if version < highest[key] {
			l.streamOrder++
			l.example("key %s: version %d published after version %d (seq %d)", key, version, highest[key], m.seq)
		}
		highest[key] = max(highest[key], version)
	}
	l.inStream = len(published)

	var lost []string
	for id := range committed {
		if applied[id] == 0 {
			l.lost++
			lost = append(lost, id)
		}
		if !published[id] {
			l.notInStream++
		}
	}
	slices.Sort(lost)
	for _, id := range lost {
		l.example("lost %s", id)
	}
	l.stuck = e.count(e.pendingQuery())
	l.dead = e.count("SELECT count(*) FROM txbox_outbox WHERE dead_at IS NOT NULL")
	return l
}

func (l *ledger) example(format string, args ...any) {
	if len(l.examples) < 20 {
		l.examples = append(l.examples, fmt.Sprintf(format, args...))
	}
}

// violations says what the ledger must not hold, or "".
func (l *ledger) violations() string {
	var bad []string
	for _, c := range []struct {
		n    int
		what string
	}{{l.lost, "lost"}, {l.notInStream, "never published"}, {l.phantom, "phantom"}, {l.double, "double effects"},
		{l.orderViolations, "per-key order violations"}, {l.streamOrder, "per-key order violations in the stream"},
		{l.stuck, "rows stuck pending"}, {l.dead, "dead rows"}, {l.deadLetters, "dead letters"}} {
		if c.n != 0 {
			bad = append(bad, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return strings.Join(bad, ", ") + "\n" + strings.Join(l.examples, "\n")
}

func (l *ledger) String() string {
	var b strings.Builder
	kinds := map[string][]time.Duration{}
	var order []string
	var all []time.Duration
	kills, stalls := 0, 0
	for _, f := range l.faults {
		if _, ok := kinds[f.kind]; !ok {
			order = append(order, f.kind)
		}
		kinds[f.kind] = append(kinds[f.kind], f.recovery)
		all = append(all, f.recovery)
		if strings.HasSuffix(f.kind, " kill") {
			kills++
		}
		if f.stalled {
			stalls++
		}
	}
	slices.Sort(order)
	fmt.Fprintf(&b, "crash ledger, %s: seed %d, faults for %s (%d faults, %d of them SIGKILLs), drained in %s, processes that exited by themselves %d\n",
		l.scenario, l.seed, l.faulting.Round(time.Second), len(l.faults), kills, l.drain.Round(time.Millisecond), l.exits)
	fmt.Fprintf(&b, "  committed %d, applied %d (effect rows %d), in the stream %d (+%d duplicate copies), dead letters %d\n",
		l.committed, l.committed-l.lost, l.effects, l.inStream, l.streamDuplicates, l.deadLetters)
	fmt.Fprintf(&b, "  lost %d, phantom %d, double effects %d, per-key order violations %d (stream %d), stuck pending %d, dead %d, never published %d\n",
		l.lost, l.phantom, l.double, l.orderViolations, l.streamOrder, l.stuck, l.dead, l.notInStream)
	late := 0
	for _, d := range l.latency {
		if d > 5*time.Second {
			late++
		}
	}
	fmt.Fprintf(&b, "  commit→effect: %s, %d of %d later than 5s\n", quantiles(l.latency), late, len(l.latency))
	fmt.Fprintf(&b, "  recovery, a fault's end to the next effect applied: %s", quantiles(all))
	if stalls > 0 {
		fmt.Fprintf(&b, ", %d with no delivery within %s", stalls, recoveryCap)
	}
	b.WriteString("\n")
	for _, k := range order {
		fmt.Fprintf(&b, "    %-20s %3d  %s\n", k, len(kinds[k]), quantiles(kinds[k]))
	}
	return strings.TrimRight(b.String(), "\n")
}

// quantiles formats p50, p99 and max of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no faults"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("p50 %s, p99 %s, max %s", r(q(0.5)), r(q(0.99)), r(s[len(s)-1]))
}

// commitToEffect returns, for each applied message, the time from its
// commit (crash_orders.committed_us, set last in the producer's
// transaction) to its first effect.
func (e *env) commitToEffect() []time.Duration {
	rows, err := e.ledger.Query("SELECT o.committed_us, min(f.applied_us) FROM crash_orders o JOIN crash_effects f ON f.msg_id = o.msg_id GROUP BY o.msg_id, o.committed_us")
	if err != nil {
		e.t.Fatalf("commit→effect: %v", err)
	}
	defer rows.Close()
	var out []time.Duration
	for rows.Next() {
		var committed, applied int64
		if err := rows.Scan(&committed, &applied); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, max(time.Duration(applied-committed)*time.Microsecond, 0))
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}
