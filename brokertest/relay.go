package brokertest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
)

// TestRelay is the end-to-end path: messages committed to an outbox on
// drv's database (which must be the test's own: TestRelay creates the
// outbox table there) are delivered by a relay through the publisher, every
// one counted at the broker, and rolled-back ones never. With
// f.PerKeyOrder, per-key order is checked too.
func TestRelay[TTx any](t *testing.T, drv txboxdriver.Driver[TTx], newPub NewFunc, f Features) {
	t.Helper()
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	must(t, err, "txboxmigrate.New")
	ctx := context.Background()
	_, err = m.Up(ctx)
	must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	must(t, err, "txbox.New")
	pub, r := newPub(t)
	tp := topic(t)

	const txs, per = 20, 10
	want := map[string]int{}
	for i := range txs {
		tx, dtx, err := drv.BeginTx(ctx)
		must(t, err, "begin")
		var msgs []txbox.Message
		for j := range per {
			id := fmt.Sprintf("%s-%d-%d", tp, i, j)
			msgs = append(msgs, txbox.Message{ID: id, Topic: tp, Key: "k" + strconv.Itoa(j%3),
				Payload: []byte(strconv.Itoa(i*per + j)), Headers: map[string]string{"n": strconv.Itoa(j)}})
		}
		_, err = ob.Add(ctx, tx, msgs...)
		must(t, err, "add")
		if i%5 == 4 {
			must(t, dtx.Rollback(ctx), "rollback")
			continue
		}
		must(t, dtx.Commit(ctx), "commit")
		for _, m := range msgs {
			want[m.ID] = 1
		}
	}
	rl, err := relay.New(drv, pub, relay.Config{BatchSize: 32, PollInterval: 10 * time.Millisecond})
	must(t, err, "relay.New")
	must(t, rl.Start(ctx), "start relay")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rl.Stop(ctx)
	})
	ds := read(t, f, r, tp, len(want))
	got := map[string]int{}
	last := map[string]int{}
	for _, d := range ds {
		got[d.ID]++
		if want[d.ID] == 0 {
			t.Errorf("delivered %s, which was rolled back or never written", d.ID)
		}
		if f.PerKeyOrder && d.Key != "" {
			n, _ := strconv.Atoi(string(d.Payload))
			if prev, ok := last[d.Key]; ok && n <= prev {
				t.Errorf("key %s: %d delivered after %d", d.Key, n, prev)
			}
			last[d.Key] = n
		}
	}
	for id := range want {
		if got[id] == 0 {
			t.Errorf("message %s not delivered", id)
		}
	}
	deadline := time.Now().Add(f.timeout())
	for {
		st, err := rl.Stats(ctx)
		must(t, err, "stats")
		if st.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows still pending after every message arrived", st.Pending)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
