package relay_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
)

// The drain time of 20,000 keyed rows (2,000 keys, committed at once once
// the relays hold their lanes) on MySQL by 1 and 2 relays, with and without
// lanes: a measurement for docs/guide/scaling.md, not an assertion. Runs only
// with TXBOX_LANE_BENCH=1.
func TestLanesMySQLDrainFigures(t *testing.T) {
	if os.Getenv("TXBOX_LANE_BENCH") == "" {
		t.Skip("a measurement: set TXBOX_LANE_BENCH=1")
	}
	const rows, keys = 20000, 2000
	for rep := 0; rep < 3; rep++ {
		for _, lanes := range []bool{false, true} {
			for _, n := range []int{1, 2} {
				e := myLanes(t, 8)
				cfg := relay.Config{BatchSize: 500, PollInterval: 5 * time.Millisecond}
				var rs []*relay.Relay
				for i := 0; i < n; i++ {
					var r *relay.Relay
					if lanes {
						r = e.laneRelay(t, nil, nopPublisher{}, cfg)
					} else {
						r = e.f.newRelay(t, nopPublisher{}, cfg)
					}
					startRelay(t, r)
					rs = append(rs, r)
				}
				if lanes {
					eventually(t, "the relays share the lanes", func() bool { return disjointCover((64+n-1)/n, rs...) })
				}
				// Every row in one transaction: the drain starts at its commit.
				msgs := make([]txbox.Message, rows)
				for i := range msgs {
					msgs[i] = txbox.Message{Topic: "bench", Key: "k" + strconv.Itoa(i%keys), Payload: []byte("x")}
				}
				e.f.add(t, true, msgs...)
				start := time.Now()
				for e.f.count(t, "published_at IS NULL") > 0 {
					time.Sleep(10 * time.Millisecond)
				}
				d := time.Since(start)
				for _, r := range rs {
					stopRelay(t, r)
				}
				t.Logf("rep %d lanes=%v relays=%d: %d rows in %v (%.0f msgs/s)", rep, lanes, n, rows, d.Round(time.Millisecond), rows/d.Seconds())
			}
		}
	}
}
