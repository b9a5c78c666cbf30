package relay_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// killablePublisher records when it acknowledged each key; once dead it
// acknowledges nothing more (a killed process sends nothing).
type killablePublisher struct {
	dead atomic.Bool
	mu   sync.Mutex
	keys []string // in acknowledgement order
	at   []time.Time
}

func (p *killablePublisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	if p.dead.Load() {
		<-ctx.Done()
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	now := time.Now()
	p.mu.Lock()
	for _, m := range msgs {
		p.keys = append(p.keys, m.Key)
		p.at = append(p.at, now)
	}
	p.mu.Unlock()
	return nil
}

// firstAfter returns, by key, the first acknowledgement after t.
func (p *killablePublisher) firstAfter(t time.Time) map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]time.Time{}
	for i, at := range p.at {
		if _, ok := out[p.keys[i]]; !ok && at.After(t) {
			out[p.keys[i]] = at
		}
	}
	return out
}

// lastKey returns the key p acknowledged last.
func (p *killablePublisher) lastKey() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) == 0 {
		return ""
	}
	return p.keys[len(p.keys)-1]
}

// TestDeadOwnerStallsItsLanes measures how long a relay that dies stalls
// the rows of its lanes. Two relays with lanes (LaneLease 2s unless
// TXBOX_BENCH_LEASE says otherwise) drain one keyed outbox that a writer
// keeps filling (256 keys, a row every 2 ms, so that every lane has rows
// waiting); relay A reaches PostgreSQL through a proxy. A is then killed
// hard: the proxy closes its connections and refuses new ones, and A
// acknowledges nothing more, so it releases nothing: its claim
// transactions end with their connections, its lane leases run out. For
// each lane A owned at the kill, the time from the kill to the first row
// of that lane the survivor B acknowledges is reported, per kill and over
// all kills (TXBOX_BENCH_KILLS, default 6). A measurement, not a test: it
// runs only with TXBOX_BENCH set.
//
//	cd tests && TXBOX_BENCH=deadowner CI=true go test -count=1 -run TestDeadOwnerStallsItsLanes -v ./relay/
func TestDeadOwnerStallsItsLanes(t *testing.T) {
	if os.Getenv("TXBOX_BENCH") == "" {
		t.Skip("a measurement: set TXBOX_BENCH=deadowner to run it")
	}
	lease, kills := 2*time.Second, 6
	if s := os.Getenv("TXBOX_BENCH_LEASE"); s != "" {
		d, err := time.ParseDuration(s)
		testenv.Must(t, err, "TXBOX_BENCH_LEASE")
		lease = d
	}
	if s := os.Getenv("TXBOX_BENCH_KILLS"); s != "" {
		fmt.Sscan(s, &kills)
	}
	f := pgxFixture(t, 8)
	e := pgLanes(t, f)
	ctx := context.Background()
	keys := make([]string, 256)
	laneOf, keyed := map[string]string{}, map[string]bool{}
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		var lane string
		testenv.Must(t, f.pool.QueryRow(ctx, "SELECT (hashtext($1) & 63)::text", keys[i]).Scan(&lane), "lane")
		laneOf[keys[i]], keyed[lane] = lane, true
	}
	// The writer: one keyed row per transaction, every 2 ms.
	stop := make(chan struct{})
	written := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				written <- nil
				return
			case <-time.After(2 * time.Millisecond):
			}
			err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
				k := keys[i%len(keys)]
				_, err := f.outbox.Add(ctx, tx, txbox.Message{Topic: "lanes.dead", Key: k, Payload: []byte(k)})
				return err
			})
			if err != nil {
				written <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		testenv.Must(t, <-written, "writer")
	}()
	cfg := relaytest.With(relay.Config{}, relaytest.Config{LaneLease: lease})
	var all, firsts, lasts []time.Duration
	for kill := range kills {
		proxy := testenv.NewProxy(t, e.target)
		pa, pb := &killablePublisher{}, &killablePublisher{}
		a, closeA := e.relay(t, proxy, pa, cfg)
		b, closeB := e.relay(t, nil, pb, cfg)
		startRelay(t, a)
		startRelay(t, b)
		// Steady: both relays hold their share and publish.
		var aLanes map[string]bool
		for until := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(until) {
				t.Fatalf("kill %d: the relays did not share the lanes within a minute", kill+1)
			}
			owners := e.pairs(t, e.owners)
			byOwner := map[string]int{}
			for _, o := range owners {
				byOwner[o[1]]++
			}
			ka := pa.lastKey()
			if len(byOwner) != 2 || byOwner[""] > 0 || ka == "" || pb.lastKey() == "" {
				continue
			}
			var ownerA string
			for _, o := range owners {
				if o[0] == laneOf[ka] {
					ownerA = o[1]
				}
			}
			aLanes = map[string]bool{}
			held := 0
			for _, o := range owners {
				if o[1] == ownerA {
					held++
					if keyed[o[0]] {
						aLanes[o[0]] = true // a lane none of the keys hashes to has no rows
					}
				}
			}
			if held == 32 {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
		// Kill A.
		pa.dead.Store(true)
		proxy.Cut()
		killed := time.Now()
		// Wait for B to acknowledge a row of each of A's lanes.
		var stalls []time.Duration
		var first map[string]time.Time
		for until := killed.Add(10*lease + 30*time.Second); ; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(until) {
				t.Fatalf("kill %d: B did not take every lane of A's within %s: %d of %d; owners %v", kill+1, until.Sub(killed), len(first), len(aLanes), e.pairs(t, e.owners))
			}
			first = map[string]time.Time{}
			for k, at := range pb.firstAfter(killed) {
				l := laneOf[k]
				if aLanes[l] && (first[l].IsZero() || at.Before(first[l])) {
					first[l] = at
				}
			}
			if len(first) < len(aLanes) {
				continue
			}
			for _, at := range first {
				stalls = append(stalls, at.Sub(killed))
			}
			break
		}
		slices.Sort(stalls)
		q := quantiles(stalls)
		t.Logf("kill %d: A's %d lanes: first publish by B after %s (first lane) to %s (last lane), p50 %.0f ms; lane lease %s",
			kill+1, len(stalls), stalls[0].Round(time.Millisecond), stalls[len(stalls)-1].Round(time.Millisecond), q[0], lease)
		all = append(all, stalls...)
		firsts = append(firsts, stalls[0])
		lasts = append(lasts, stalls[len(stalls)-1])
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = b.Stop(sctx)
		_ = a.Stop(sctx)
		cancel()
		closeA()
		closeB()
	}
	qa, qf, ql := quantiles(all), quantiles(firsts), quantiles(lasts)
	t.Logf("%d kills, lane lease %s: per lane (%d) p50 %.0f ms p99 %.0f ms; first lane of a kill p50 %.0f ms (min %s, max %s); last lane of a kill p50 %.0f ms (min %s, max %s)",
		kills, lease, len(all), qa[0], qa[1], qf[0], slices.Min(firsts).Round(time.Millisecond), slices.Max(firsts).Round(time.Millisecond),
		ql[0], slices.Min(lasts).Round(time.Millisecond), slices.Max(lasts).Round(time.Millisecond))
}
