package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/txboxdriver"
)

// errLeaseStale is a round's error when its claim is too old to publish:
// the lane lease or the claim transaction may have ended meanwhile.
var errLeaseStale = errors.New("txbox/relay: the claim outlived its lease; released unpublished")

// laneKeeper holds the lane leases of one relay on PostgreSQL, MySQL or
// MariaDB: it joins the relays sharing the table, renews its leases, takes
// or gives lanes up until it holds its share (outboxsql.NumLanes / live
// relays, rounded up), and fences the lanes it takes (see
// docs/design/relay.md).
type laneKeeper struct {
	r     *Relay
	db    *outboxsql.Lanes
	lease time.Duration

	mu         sync.Mutex
	active     []outboxsql.Lease // fenced: claims read these
	pending    []outboxsql.Lease // taken over, not yet fenced
	validUntil time.Time         // the leases' end, by this relay's clock
	relays     int               // live relays at the last beat
	short      bool              // the last beat found fewer lanes than the share

	outage outage // runs of failed heartbeats (beatTexts)
	// ownBeat makes the beats of a relay that does not run (claim) take
	// turns.
	ownBeat sync.Mutex

	// conflicts is Lanes.Conflicts when the relay last said so in its
	// log, at warned (held).
	heldMu    sync.Mutex
	conflicts int64
	warned    time.Time
}

func newLaneKeeper(r *Relay, table string) (*laneKeeper, error) {
	db, err := outboxsql.NewLanes(r.store, table, ownerName())
	if err != nil {
		return nil, err
	}
	db.Rescan = r.cfg.PollInterval
	return &laneKeeper{r: r, db: db, lease: r.cfg.test.LaneLease, outage: outage{texts: &beatTexts}}, nil
}

// LanesSupported reports whether dialect d has lanes (keyed rows shared
// by lane leases between relays).
func LanesSupported(d txboxdriver.Dialect) bool {
	return d == txboxdriver.Postgres || d == txboxdriver.MySQL
}

// ownerName names one relay run: host, process and a random part.
func ownerName() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// run beats until ctx ends: every LaneLease/20, so that relays joining or
// leaving are met with a new share within that time; every 50ms while the
// relay holds less than its share or has lanes still to fence (unless the
// last beat failed).
func (k *laneKeeper) run(ctx context.Context) {
	failed := false
	for {
		wait := k.lease / 20
		if k.unsettled() && !failed {
			wait = min(wait, 50*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := k.beat(ctx)
		failed = err != nil
		switch {
		case err == nil:
			k.outage.ended(k.r.log, "", time.Now())
		case ctx.Err() == nil:
			k.outage.failed(k.r.log, err, 0, false, time.Now())
		}
	}
}

// unsettled reports whether the last beat left the relay short of its
// share, or with lanes taken over but not yet fenced.
func (k *laneKeeper) unsettled() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pending) > 0 || k.short
}

// beat is one heartbeat: join, renew, rebalance, fence.
func (k *laneKeeper) beat(ctx context.Context) error {
	sent := time.Now()
	relays, err := k.db.Join(ctx, k.lease)
	if err != nil {
		return err
	}
	owned, err := k.db.Renew(ctx, k.lease)
	if err != nil {
		return err
	}
	k.mu.Lock()
	// A lease that lapsed (by this relay's clock: a beat was late) made
	// its claims read no keyed row; the relay may have gone idle since.
	// Renewed, it is woken, as when it takes a lane (fence).
	now := time.Now()
	revived := !k.validUntil.IsZero() && now.After(k.validUntil) && now.Before(sent.Add(k.lease)) && len(k.active) > 0
	k.validUntil = sent.Add(k.lease)
	k.relays = relays
	k.active = keep(k.active, owned)
	k.pending = keep(k.pending, owned)
	for _, o := range owned { // owned but unknown: fence it first
		if !has(k.active, o) && !has(k.pending, o) {
			k.pending = append(k.pending, o)
		}
	}
	target := (outboxsql.NumLanes + relays - 1) / relays
	var surplus []int16
	for len(k.active)+len(k.pending) > target {
		// Give up pending lanes first, then the highest active ones.
		if n := len(k.pending); n > 0 {
			surplus = append(surplus, k.pending[n-1].Lane)
			k.pending = k.pending[:n-1]
		} else {
			n := len(k.active)
			surplus = append(surplus, k.active[n-1].Lane)
			k.active = k.active[:n-1]
		}
	}
	need := target - len(k.active) - len(k.pending)
	revived = revived && len(k.active) > 0
	k.mu.Unlock()
	if revived {
		k.r.Wake()
	}
	if len(surplus) > 0 {
		// Claims no longer read these lanes; the claims in flight keep
		// their locks, which the next owner's fence waits for.
		if err := k.db.Release(ctx, surplus); err != nil {
			return fmt.Errorf("release lanes: %w", err)
		}
	}
	if need > 0 {
		got, err := k.db.Acquire(ctx, k.lease, need)
		if err != nil {
			return fmt.Errorf("acquire lanes: %w", err)
		}
		k.mu.Lock()
		k.pending = append(k.pending, got...)
		k.short = len(got) < need
		k.mu.Unlock()
	} else {
		k.mu.Lock()
		k.short = false
		k.mu.Unlock()
	}
	return k.fence(ctx)
}

// fence moves the pending lanes that no claim transaction holds any more
// to the active ones, and wakes the relay when there are any.
func (k *laneKeeper) fence(ctx context.Context) error {
	k.mu.Lock()
	lanes := make([]int16, len(k.pending))
	for i, p := range k.pending {
		lanes[i] = p.Lane
	}
	k.mu.Unlock()
	if len(lanes) == 0 {
		return nil
	}
	free, err := k.db.Fence(ctx, lanes)
	if err != nil {
		return fmt.Errorf("fence lanes: %w", err)
	}
	if len(free) == 0 {
		return nil
	}
	k.mu.Lock()
	k.pending = slices.DeleteFunc(k.pending, func(p outboxsql.Lease) bool {
		if slices.Contains(free, p.Lane) {
			k.active = append(k.active, p)
			return true
		}
		return false
	})
	slices.SortFunc(k.active, func(a, b outboxsql.Lease) int { return int(a.Lane) - int(b.Lane) })
	k.mu.Unlock()
	k.r.Wake()
	return nil
}

// leave gives every lane up and leaves the relays, once the loops ended.
func (k *laneKeeper) leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	k.mu.Lock()
	var lanes []int16
	for _, l := range append(k.active, k.pending...) {
		lanes = append(lanes, l.Lane)
	}
	k.active, k.pending = nil, nil
	k.mu.Unlock()
	if len(lanes) > 0 {
		if err := k.db.Release(ctx, lanes); err != nil {
			k.r.log.Warn("txbox relay: cannot give the lanes up; they pass to other relays when their lease ends", "err", err)
		}
	}
	if err := k.db.Leave(ctx); err != nil {
		k.r.log.Warn("txbox relay: cannot leave the lanes' relays", "err", err)
	}
}

// claim claims keyed rows from the active lanes while their lease holds,
// and rows without a key from anywhere (outboxsql.Lanes.Claim). A relay
// that does not run (Round called on its own) has no heartbeat: its claim
// beats first while it holds less than its share, has lanes to fence, or
// has less than half its lease left.
func (k *laneKeeper) claim(ctx context.Context, limit int) (*outboxsql.Batch, error) {
	if !k.r.running.Load() && k.expiring() {
		k.ownBeat.Lock()
		var err error
		if k.expiring() {
			err = k.beat(ctx)
		}
		k.ownBeat.Unlock()
		if err != nil {
			return nil, fmt.Errorf("lanes: %w", err)
		}
	}
	b, err := k.db.Claim(ctx, limit, k.leases())
	k.held()
	return b, err
}

// heldEvery is how often at most the relay logs that rows of its lanes
// are held by another transaction.
const heldEvery = time.Minute

// held logs, at most every heldEvery, that claims met rows of this
// relay's lanes locked by another transaction (outboxsql.Lanes.Conflicts):
// their keys wait from that row on, never published out of order; it is a
// transaction holding outbox rows, or a fencing failure.
func (k *laneKeeper) held() {
	n := k.db.Conflicts()
	k.heldMu.Lock()
	defer k.heldMu.Unlock()
	if n == k.conflicts || time.Since(k.warned) < heldEvery {
		return
	}
	k.r.log.Error("txbox relay: rows of lanes this relay owns are locked by another transaction; their keys wait from those rows on (a transaction holds outbox rows, or two relays own a lane: a fencing failure)",
		"claims", n-k.conflicts)
	k.conflicts, k.warned = n, time.Now()
}

// expiring reports whether a relay that does not run beats before it
// claims (see claim).
func (k *laneKeeper) expiring() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pending) > 0 || k.short || time.Until(k.validUntil) < k.lease/2
}

// leases returns the lanes a claim may take keyed rows from: the active
// ones while their lease holds, else none.
func (k *laneKeeper) leases() []outboxsql.Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Now().Before(k.validUntil) {
		return slices.Clone(k.active)
	}
	return nil
}

// mayPublish reports whether a batch with ordering keys may still be
// published as far as lanes go: the lane leases hold (Relay.mayPublish
// checks the claim's age). Else another relay may own its lanes.
func (k *laneKeeper) mayPublish(batch *outboxsql.Batch) bool {
	if !batch.Keyed() {
		return true // no lane to fence: rows without a key are anyone's
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return time.Now().Before(k.validUntil)
}

// ownedLanes returns the lanes this relay claims keyed rows from now, in
// order (Stats.Lanes); nil on SQLite.
func (r *Relay) ownedLanes() []int {
	if r.lanes == nil {
		return nil
	}
	r.lanes.mu.Lock()
	defer r.lanes.mu.Unlock()
	out := make([]int, len(r.lanes.active))
	for i, l := range r.lanes.active {
		out[i] = int(l.Lane)
	}
	return out
}

func keep(ls, owned []outboxsql.Lease) []outboxsql.Lease {
	return slices.DeleteFunc(ls, func(l outboxsql.Lease) bool { return !has(owned, l) })
}

func has(ls []outboxsql.Lease, l outboxsql.Lease) bool {
	return slices.Contains(ls, l)
}
