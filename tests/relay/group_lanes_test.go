package relay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// A relay with Lanes inside a Group holds the table's lanes as it would
// alone (the group beats its lane lease heartbeat) and delivers keyed rows,
// each key in order; removed from the group it
// gives its lanes up.
func TestGroupWithLanesDeliversKeyedRows(t *testing.T) {
	t.Parallel()
	eachLaneDialect(t, 8, func(t *testing.T, e laneEnv) {
		log := &sendLog{}
		r := e.laneRelay(t, nil, &logPublisher{name: "g", log: log}, relaytest.With(relay.Config{}, relaytest.Config{LaneLease: 2 * time.Second}))
		g, err := relay.NewGroup(relay.GroupConfig{})
		testenv.Must(t, err, "NewGroup")
		testenv.Must(t, g.Add(context.Background(), relay.Store{Name: "lanes", Relay: r}), "add")
		runGroup(t, g)

		adder := &keyedAdder{f: e.f}
		for i := 0; i < 20; i++ {
			keys := make([]string, 30)
			for k := range keys {
				keys[k] = "k" + strconv.Itoa(k)
			}
			adder.add(t, keys...)
		}
		untilDrained(t, "keyed rows delivered", func() int64 { return e.f.count(t, "published_at IS NULL") })
		if n := len(testenv.RelayStats(r).Lanes); n != 64 {
			t.Fatalf("the group's relay holds %d lanes, want all 64", n)
		}
		log.checkLanes(t, e, adder.want())

		testenv.Must(t, g.Remove(context.Background(), "lanes"), "remove")
		eventually(t, "lanes given up", func() bool {
			for _, o := range laneOwners(t, e) {
				if o != "" {
					return false
				}
			}
			return true
		})
	})
}

// untilDrained waits until left() is 0, failing t when it has not fallen
// for 30s (progress-bounded, whatever the machine's speed).
func untilDrained(t *testing.T, what string, left func() int64) {
	t.Helper()
	last, lastAt := left(), time.Now()
	for last > 0 {
		time.Sleep(20 * time.Millisecond)
		n := left()
		if n < last {
			last, lastAt = n, time.Now()
			continue
		}
		if time.Since(lastAt) > 30*time.Second {
			t.Fatalf("%s: %d rows left, none delivered for 30s", what, n)
		}
	}
}
