package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// A scrape right after a relay starts, alone or as a store of a Group,
// sees the sample's gauges (the backlog, the oldest ages): the first
// sample is taken as the relay starts serving, not one SampleInterval
// (here an hour) later.
func TestScrapeRightAfterStartSeesTheSample(t *testing.T) {
	t.Parallel()
	for _, inGroup := range []bool{false, true} {
		name := "relay"
		if inGroup {
			name = "group"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _ := testenv.Postgres(t, 4)
			drv, ob := pgOutbox(t, pool)
			for i := range 3 {
				add(t, pool, ob, txbox.Message{Topic: "first.sample", Payload: []byte{byte('0' + i)}})
			}
			_, err := pool.Exec(ctx, `UPDATE txbox_outbox SET created_at = now() - interval '60 seconds'`)
			testenv.Must(t, err, "age the rows")

			m, reg := metricsFor(t)
			r, err := relay.New[pgx.Tx](drv, &ackAll{}, relaytest.With(relay.Config{Observer: m.Relay(), DisableNotify: true}, relaytest.Config{SampleInterval: time.Hour}))
			testenv.Must(t, err, "relay.New")
			if inGroup {
				g, err := relay.NewGroup(relay.GroupConfig{})
				testenv.Must(t, err, "NewGroup")
				testenv.Must(t, g.Add(ctx, relay.Store{Name: "s", Relay: r}), "add")
				testenv.Must(t, g.Start(ctx), "start group")
				t.Cleanup(func() { _ = g.Stop(context.Background()) })
			} else {
				testenv.Must(t, r.Start(ctx), "start")
				t.Cleanup(func() { _ = r.Stop(context.Background()) })
			}

			for _, name := range []string{"txbox_relay_oldest_claimable_age_seconds", "txbox_relay_oldest_in_flight_age_seconds"} {
				if v := value(t, reg, name); v < 0 {
					t.Errorf("%s absent right after start", name)
				}
			}
			// The sample was taken before the first round: the three rows
			// were pending, the oldest a minute old.
			if v := value(t, reg, "txbox_relay_backlog", "state", "pending"); v != 3 {
				t.Errorf("txbox_relay_backlog{state=pending} = %v right after start, want 3", v)
			}
			if v := value(t, reg, "txbox_relay_oldest_claimable_age_seconds"); v < 60 {
				t.Errorf("oldest claimable age %vs right after start, want at least 60s", v)
			}
		})
	}
}
