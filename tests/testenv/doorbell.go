package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
)

// Doorbell is a relay, or a store of a relay group, whose wake-up doorbell
// a test waits for before it writes (see WaitIdleArmed).
type Doorbell struct {
	Name string // in failure messages
	// Wake is the doorbell table, qualified if need be: the outbox
	// table's name with "_wake" (e.g. "txbox_outbox_wake").
	Wake string
	// Idle reports whether the relay's last round succeeded and claimed
	// nothing: RoundWatcher.Idle for a relay, the store's last event for a
	// store of a group.
	Idle func() bool
}

// DoorbellArmed reads whether the doorbell table wake is armed.
func DoorbellArmed(t testing.TB, pool *pgxpool.Pool, wake string) bool {
	t.Helper()
	var armed bool
	Must(t, pool.QueryRow(context.Background(),
		"SELECT coalesce((SELECT armed FROM "+wake+"), false)").Scan(&armed), "doorbell %s", wake)
	return armed
}

// WaitIdleArmed waits until each of bells is idle with its doorbell armed:
// its last round claimed nothing (a round that claims rows disarms the
// doorbell after its marks, so a doorbell read before that is stale) and,
// read after that round, its doorbell is armed. From then on a writer's
// INSERT notifies, until the relay claims rows or its listener reconnects
// (which disarms before it listens: wait for Listening first). Tests that
// prove a notification woke a relay polling once an hour write only then. A
// commit must not race the arming: a transaction whose INSERT ran while the
// doorbell was disarmed sends nothing, and if it commits after the relay's
// last look it waits for the next poll (see "Wake-up latency" in
// docs/reference/guarantees.md). It fails, naming the relays still busy or unarmed,
// after three minutes.
func WaitIdleArmed(t testing.TB, pool *pgxpool.Pool, bells ...Doorbell) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var busy, unarmed []string
		for _, b := range bells {
			switch {
			case !b.Idle():
				busy = append(busy, b.Name)
			case !DoorbellArmed(t, pool, b.Wake):
				unarmed = append(unarmed, b.Name)
			}
		}
		if len(busy)+len(unarmed) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays never went idle with their doorbells armed: still at work or failing %v, doorbell disarmed %v", busy, unarmed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RoundWatcher is a txbox.RelayObserver, for relay.Config.Observer, that
// tells whether the relay's last round claimed nothing (see WaitIdleArmed).
// It suits a relay whose rounds run one at a time (Concurrency 1, no
// full batches): Idle reads the last claim of any of its loops.
type RoundWatcher struct {
	txbox.BaseRelayObserver
	mu   sync.Mutex
	idle bool
}

// Claimed records whether the round's claim found nothing.
func (w *RoundWatcher) Claimed(n int, _ time.Duration) {
	w.mu.Lock()
	w.idle = n == 0
	w.mu.Unlock()
}

// RoundFailed records that the round failed: not idle.
func (w *RoundWatcher) RoundFailed(string) {
	w.mu.Lock()
	w.idle = false
	w.mu.Unlock()
}

// Idle reports whether the last round claimed nothing and did not fail
// (false before the first round).
func (w *RoundWatcher) Idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.idle
}
