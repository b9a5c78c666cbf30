package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/roundtimes"
)

// rounds records the relay's rounds and wake-ups during a latency run
// (it is the relay's Tracer, and a roundtimes.Recorder), and each
// message's commit and arrival, to break commit→broker down by stage.
type rounds struct {
	mu      sync.Mutex
	rounds  []roundtimes.Round
	wakes   int
	merged  int // wake-ups that found a round in flight or queued
	commit  map[string]time.Time
	arrival map[string]time.Time
	pings   []time.Duration // round trips of SELECT 1 on the writers' pool meanwhile
	since   time.Time       // rounds begun before are not recorded (reset)
}

// ping adds the round trip of one SELECT 1 made during the run: the
// machine's floor for each round trip of a commit and a claim.
func (r *rounds) ping(d time.Duration) {
	r.mu.Lock()
	r.pings = append(r.pings, d)
	r.mu.Unlock()
}

func newRounds() *rounds {
	return &rounds{commit: map[string]time.Time{}, arrival: map[string]time.Time{}}
}

// reset forgets what was recorded: the warm-up's rounds, wake-ups and
// pings (latencyRun). A round begun before at and ended after it (marked
// after the warm-up's last message arrived) is not recorded either.
func (r *rounds) reset(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rounds, r.wakes, r.merged, r.pings = nil, 0, 0, nil
	clear(r.commit)
	clear(r.arrival)
	r.since = at
}

func (r *rounds) StartPublish(ctx context.Context, _ []txbox.Message) (context.Context, func([]error)) {
	return ctx, nil
}

func (r *rounds) RelayRound(t roundtimes.Round) {
	r.mu.Lock()
	if !t.Start.Before(r.since) {
		r.rounds = append(r.rounds, t)
	}
	r.mu.Unlock()
}

func (r *rounds) RelayWake(_ time.Time, busy bool) {
	r.mu.Lock()
	r.wakes++
	if busy {
		r.merged++
	}
	r.mu.Unlock()
}

func (r *rounds) committed(id string, at time.Time) {
	r.mu.Lock()
	r.commit[id] = at
	r.mu.Unlock()
}

func (r *rounds) arrived(id string, at time.Time) {
	r.mu.Lock()
	r.arrival[id] = at
	r.mu.Unlock()
}

// The stages of one message's commit→broker time. Before its round's
// claim was sent, the time is spent in the relay's other rounds (in their
// claim, their publish, their marks) or in none (idle: the wake-up or the
// look after a round that found nothing; between rounds: the scheduler).
// Its own claim is split where the relay says when its statements went
// out (after the relay's claim before it had picked) and when the
// database answered.
var stageNames = []string{"wait: others' claim", "wait: others' publish", "wait: others' mark", "wait: no round", "own claim: behind the relay's previous claim", "own claim: database round trip", "own claim: pick", "own prepare", "own publish→arrival"}

// breakdown writes the mean of each stage over every message, and over
// the slowest 1%, with the rounds' sizes and the wake-ups merged into a
// running round.
func (r *rounds) breakdown(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rounds) == 0 {
		return
	}
	rs := slices.Clone(r.rounds)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
	type msg struct {
		total  time.Duration
		stages [9]time.Duration
	}
	var ms []msg
	rows := 0
	var claim, behind, trip, mark, round time.Duration
	var trips []time.Duration
	for i, rd := range rs {
		rows += len(rd.IDs)
		claim += rd.Claimed.Sub(rd.Start)
		if !rd.Sent.IsZero() && !rd.Answered.IsZero() {
			behind += rd.Sent.Sub(rd.Start)
			trip += rd.Answered.Sub(rd.Sent)
			trips = append(trips, rd.Answered.Sub(rd.Sent))
		}
		mark += rd.Finished.Sub(rd.Acked)
		round += rd.Finished.Sub(rd.Start)
		for _, id := range rd.IDs {
			c, ok1 := r.commit[id]
			a, ok2 := r.arrival[id]
			if !ok1 || !ok2 {
				continue
			}
			var m msg
			m.total = a.Sub(c)
			// [c, rd.Start): which stage of the other rounds covers it,
			// the earliest-started round first; the rest is no round.
			covered := time.Duration(0)
			cur := c
			for _, o := range rs[:i] {
				if !o.Finished.After(cur) {
					continue
				}
				for k, span := range [][2]time.Time{{o.Start, o.Claimed}, {o.Claimed, o.Acked}, {o.Acked, o.Finished}} {
					from, to := maxTime(span[0], cur), minTime(span[1], rd.Start)
					if to.After(from) {
						m.stages[k] += to.Sub(from)
						covered += to.Sub(from)
						cur = to
					}
				}
			}
			if wait := rd.Start.Sub(c); wait > covered {
				m.stages[3] = wait - covered
			}
			sent, answered := rd.Sent, rd.Answered
			if sent.IsZero() || answered.IsZero() {
				sent, answered = rd.Start, rd.Claimed // not known: all of it the round trip
			}
			m.stages[4] = max(0, sent.Sub(maxTime(rd.Start, c)))
			m.stages[5] = max(0, answered.Sub(maxTime(sent, c)))
			m.stages[6] = max(0, rd.Claimed.Sub(maxTime(answered, c)))
			m.stages[7] = max(0, rd.Publish.Sub(maxTime(rd.Claimed, c)))
			m.stages[8] = max(0, a.Sub(maxTime(rd.Publish, c)))
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].total < ms[j].total })
	mean := func(ms []msg) (total float64, st [9]float64) {
		for _, m := range ms {
			total += ms2(m.total)
			for k := range st {
				st[k] += ms2(m.stages[k])
			}
		}
		total /= float64(len(ms))
		for k := range st {
			st[k] /= float64(len(ms))
		}
		return total, st
	}
	n := float64(len(rs))
	fmt.Fprintf(w, "      rounds with rows %d (%.1f rows each; claim %.2f ms (behind the previous claim %.2f, database round trip %.2f), mark %.2f ms, round %.2f ms, mean); wake-ups %d, %d of them into a round in flight or queued\n",
		len(rs), float64(rows)/n, ms2(claim)/n, ms2(behind)/n, ms2(trip)/n, ms2(mark)/n, ms2(round)/n, r.wakes, r.merged)
	if len(r.pings) > 0 && len(trips) > 0 {
		fmt.Fprintf(w, "      round trip, mean / p50 / p99 ms: the claim's %s; a SELECT 1 meanwhile on the writers' pool %s\n",
			spread(trips), spread(r.pings))
	}
	if slow := slowest(rs, 5); slow != "" {
		fmt.Fprintf(w, "      the slowest claims' round trips (from the run's first claim): %s\n", slow)
	}
	for _, part := range []struct {
		name string
		ms   []msg
	}{{"all", ms}, {"slowest 1%", ms[len(ms)*99/100:]}} {
		total, st := mean(part.ms)
		fmt.Fprintf(w, "      mean ms, %-10s %6.2f =", part.name, total)
		for k, name := range stageNames {
			fmt.Fprintf(w, " %s %.2f", name, st[k])
			if k < len(stageNames)-1 {
				fmt.Fprint(w, " +")
			}
		}
		fmt.Fprintln(w)
	}
}

// slowest describes the n claims of rs (sorted by start) with the longest
// database round trips: how long, when in the run, and how many rows each
// held. A few slow ones at the start are claims on connections new to the
// relay (warmUp); spread over the run, the server's or the machine's.
func slowest(rs []roundtimes.Round, n int) string {
	if len(rs) == 0 {
		return ""
	}
	idx := make([]int, 0, len(rs))
	for i, rd := range rs {
		if !rd.Sent.IsZero() && !rd.Answered.IsZero() {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
		return rs[idx[a]].Answered.Sub(rs[idx[a]].Sent) > rs[idx[b]].Answered.Sub(rs[idx[b]].Sent)
	})
	var parts []string
	for _, i := range idx[:min(n, len(idx))] {
		rd := rs[i]
		parts = append(parts, fmt.Sprintf("%.1f ms at +%.2f s (%d rows)", ms2(rd.Answered.Sub(rd.Sent)), rd.Sent.Sub(rs[0].Start).Seconds(), len(rd.IDs)))
	}
	return strings.Join(parts, ", ")
}

// spread is the mean, median and 99th percentile of ds, in ms.
func spread(ds []time.Duration) string {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return fmt.Sprintf("%.2f / %.2f / %.2f (%d)", ms2(sum)/float64(len(ds)), ms2(ds[len(ds)/2]), ms2(ds[len(ds)*99/100]), len(ds))
}

func ms2(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// stages writes the rounds' mean claim, publish and mark times, and the
// share of the run's time during which a claim, a publish, a mark, and
// any of them, was in flight: how much they overlap.
func (r *rounds) stages(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rounds) == 0 {
		return
	}
	first, last := r.rounds[0].Start, r.rounds[0].Finished
	var claim, publish, mark time.Duration
	spans := make([][][2]time.Time, 4)
	for _, rd := range r.rounds {
		first, last = minTime(first, rd.Start), maxTime(last, rd.Finished)
		claim += rd.Claimed.Sub(rd.Start)
		publish += rd.Acked.Sub(rd.Publish)
		mark += rd.Finished.Sub(rd.Acked)
		spans[0] = append(spans[0], [2]time.Time{rd.Start, rd.Claimed})
		spans[1] = append(spans[1], [2]time.Time{rd.Publish, rd.Acked})
		spans[2] = append(spans[2], [2]time.Time{rd.Acked, rd.Finished})
		spans[3] = append(spans[3], [2]time.Time{rd.Start, rd.Finished})
	}
	n, wall := float64(len(r.rounds)), last.Sub(first)
	var share [4]float64
	for k, s := range spans {
		share[k] = 100 * float64(covered(s)) / float64(wall)
	}
	fmt.Fprintf(w, "      %d rounds, mean claim %.1f ms, publish %.1f ms, mark %.1f ms; time with a claim in flight %.0f%%, a publish %.0f%%, a mark %.0f%%, any %.0f%%\n",
		len(r.rounds), ms2(claim)/n, ms2(publish)/n, ms2(mark)/n, share[0], share[1], share[2], share[3])
}

// covered is the length of the union of spans.
func covered(spans [][2]time.Time) time.Duration {
	sort.Slice(spans, func(i, j int) bool { return spans[i][0].Before(spans[j][0]) })
	var total time.Duration
	var end time.Time
	for _, s := range spans {
		from := maxTime(s[0], end)
		if s[1].After(from) {
			total += s[1].Sub(from)
		}
		end = maxTime(end, s[1])
	}
	return total
}
