package drivertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
)

func (s *suite[TTx]) testRelaysConcurrent(t *testing.T) {
	ctx := context.Background()
	drv := s.setup(t)
	ob := outbox(t, drv)
	const total = 600
	pub := &Recorder{}
	var relays []*relay.Relay
	for range s.opts.Relays {
		r := newRelay(t, drv, pub, relaytest.With(relay.Config{BatchSize: 25, PollInterval: time.Millisecond}, relaytest.Config{Concurrency: 2}))
		must(t, r.Start(ctx), "start relay")
		relays = append(relays, r)
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < total/6; i += 10 {
				var msgs []txbox.Message
				for j := range 10 {
					key := ""
					if j%2 == 0 {
						key = fmt.Sprint("k", (i+j)%5)
					}
					msgs = append(msgs, txbox.Message{ID: fmt.Sprintf("w%d-%d", w, i+j), Topic: "t", Key: key, Payload: []byte("x")})
				}
				tx, dtx, err := drv.BeginTx(ctx)
				if err == nil {
					if _, err = ob.Add(ctx, tx, msgs...); err == nil {
						err = dtx.Commit(ctx)
					} else {
						_ = dtx.Rollback(ctx)
					}
				}
				if err != nil {
					t.Errorf("writer: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for len(pub.Published()) < total && !t.Failed() {
		time.Sleep(5 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, r := range relays {
		must(t, r.Stop(stopCtx), "stop relay")
	}
	seen := map[string]int{}
	for _, m := range pub.Published() {
		seen[m.ID]++
	}
	if len(seen) != total {
		t.Fatalf("%d distinct messages published, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s published %d times by %d relays", id, n, s.opts.Relays)
		}
	}
}
