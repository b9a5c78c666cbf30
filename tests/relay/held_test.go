package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// laneOf returns the lane of key on PostgreSQL (the lane index's hash).
func laneOf(t *testing.T, f fixture, key string) int {
	var lane int
	testenv.Must(t, f.pool.QueryRow(context.Background(), "SELECT hashtext($1) & 63", key).Scan(&lane), "lane of %s", key)
	return lane
}

// otherLaneKey returns a key whose lane is not the lane of key.
func otherLaneKey(t *testing.T, f fixture, key string) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("o%d", i)
		if laneOf(t, f, k) != laneOf(t, f, key) {
			return k
		}
	}
}

// holdRow locks, in a transaction of its own that the test ends, the
// outbox row whose payload is payload, as a transaction holding outbox
// rows (or a second owner of its lane) would.
func holdRow(t *testing.T, f fixture, payload string) pgx.Tx {
	ctx := context.Background()
	holder, err := f.pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	t.Cleanup(func() { _ = holder.Rollback(ctx) })
	tag, err := holder.Exec(ctx, "SELECT 1 FROM txbox_outbox WHERE payload = $1 FOR UPDATE", []byte(payload))
	testenv.Must(t, err, "hold %s", payload)
	if tag.RowsAffected() != 1 {
		t.Fatalf("held %d rows of payload %s, want 1", tag.RowsAffected(), payload)
	}
	return holder
}

// A relay goes on past a key whose head another transaction holds locked,
// or whose head is dead (the key parked): key a's rows come first in the
// table and fill many batches, and the rows without a key and key b's, in
// another lane, lie beyond them. The relay polls once an hour and has no
// notifications, so it publishes those only by claiming past a's rows at
// once. Once the held head is free, a drains in order.
func TestRelayGoesOnPastAHeldOrDeadHead(t *testing.T) {
	t.Parallel()
	for _, head := range []string{"held", "parked"} {
		t.Run(head, func(t *testing.T) {
			t.Parallel()
			const perKey, loose = 1500, 20
			f := pgxFixture(t, 8)
			addKeyed(t, f, "held", []string{"a"}, perKey)
			b := otherLaneKey(t, f, "a")
			var keys []string
			for i := 1; i <= loose; i++ {
				keys = append(keys, fmt.Sprintf("u%d", i))
				f.add(t, true, txbox.Message{Topic: "held", Payload: []byte(fmt.Sprintf("u%d:1", i))})
			}
			addKeyed(t, f, "held", []string{b}, loose)
			ctx := context.Background()
			var holder pgx.Tx
			if head == "held" {
				holder = holdRow(t, f, "a:1")
			} else {
				f.exec(t, "UPDATE txbox_outbox SET dead_at = now(), last_error = 'test' WHERE payload = 'a:1'")
			}

			log := newRunLog(nil)
			r := f.newRelay(t, log, relay.Config{BatchSize: 10, PollInterval: time.Hour, DisableNotify: true})
			startRelay(t, r)
			testenv.Await(t, "the rows beyond key a's published", func() (bool, string) {
				n := testenv.RelayStats(r).Published
				return n == 2*loose, fmt.Sprintf("%d published", n)
			})
			log.check(t, keys, 1)
			log.check(t, []string{b}, loose)
			if n := f.count(t, "published_at IS NULL AND ordering_key = 'a'"); n != perKey {
				t.Fatalf("%d of key a's rows pending behind its %s head, want %d", n, head, perKey)
			}
			if head == "parked" {
				return
			}
			if testenv.RelayStats(r).LaneConflicts == 0 {
				t.Fatalf("no lane conflict counted while a's head was held")
			}
			testenv.Must(t, holder.Rollback(ctx), "release a's head")
			r.Wake()
			testenv.Await(t, "every message published", func() (bool, string) {
				n := testenv.RelayStats(r).Published
				return n == perKey+2*loose, fmt.Sprintf("%d published", n)
			})
			log.check(t, keys, 1)
			log.check(t, []string{b}, loose)
			log.check(t, []string{"a"}, perKey)
		})
	}
}

// A key whose head is held fills a claim's read of its lane with rows
// that cannot be taken (with a batch of one row, that head alone); the
// lanes after it in the read, unread then, are read by the next claim at
// once, not at the next poll.
func TestRelayReadsPastALaneFilledByAHeldKey(t *testing.T) {
	t.Parallel()
	const batch, others = 1, 5
	f := pgxFixture(t, 8)
	// a's lane comes before b's in a claim that reads the lanes from the
	// first: the first claim reads a's rows up to its limit, then stops.
	a, b := "a", ""
	for i := 0; b == ""; i++ {
		if k := fmt.Sprintf("o%d", i); laneOf(t, f, k) > laneOf(t, f, a) {
			b = k
		}
		if i > 1000 {
			a, i = fmt.Sprintf("a%d", i), 0
		}
	}
	addKeyed(t, f, "fill", []string{a}, 3)
	addKeyed(t, f, "fill", []string{b}, others)
	holder := holdRow(t, f, a+":1")

	log := newRunLog(nil)
	r := f.newRelay(t, log, relay.Config{BatchSize: batch, PollInterval: time.Hour, DisableNotify: true})
	startRelay(t, r)
	testenv.Await(t, "the rows of "+b+" published", func() (bool, string) {
		n := testenv.RelayStats(r).Published
		return n == others, fmt.Sprintf("%d published", n)
	})
	log.check(t, []string{b}, others)
	testenv.Must(t, holder.Rollback(context.Background()), "release %s:1", a)
	r.Wake()
	testenv.Await(t, "every message published", func() (bool, string) {
		n := testenv.RelayStats(r).Published
		return n == others+3, fmt.Sprintf("%d published", n)
	})
	log.check(t, []string{a}, 3)
}

// A row locked by hand by another transaction holds at most its own key
// (of rows without a key: only itself): every other row is published while
// it is held, and once it is free, its key drains in order.
func TestRelayHandLockedRow(t *testing.T) {
	t.Parallel()
	for _, held := range []string{"u5:1", "a:5"} {
		t.Run(held, func(t *testing.T) {
			t.Parallel()
			const perKey, loose = 10, 10
			f := pgxFixture(t, 8)
			b := otherLaneKey(t, f, "a")
			addKeyed(t, f, "hand", []string{"a", b}, perKey)
			var loosePayloads []string
			for i := 1; i <= loose; i++ {
				loosePayloads = append(loosePayloads, fmt.Sprintf("u%d", i))
				f.add(t, true, txbox.Message{Topic: "hand", Payload: []byte(fmt.Sprintf("u%d:1", i))})
			}
			holder := holdRow(t, f, held)
			// What waits while the row is held: u5:1 alone, or a:5 to a:10.
			waiting := int64(1)
			if held == "a:5" {
				waiting = perKey - 4
			}
			total := int64(2*perKey + loose)

			log := newRunLog(nil)
			r := f.newRelay(t, log, relay.Config{BatchSize: 10, PollInterval: 20 * time.Millisecond, DisableNotify: true})
			startRelay(t, r)
			testenv.Await(t, "every row but the held ones published", func() (bool, string) {
				n := testenv.RelayStats(r).Published
				return n == total-waiting, fmt.Sprintf("%d published", n)
			})
			if n := f.count(t, "published_at IS NULL"); n != waiting {
				t.Fatalf("%d rows pending while %s is held, want %d", n, held, waiting)
			}
			// Rows committed while the row is held (the relay owns every
			// lane by now) flow too.
			for n := perKey + 1; n <= 2*perKey; n++ {
				loosePayloads = append(loosePayloads, fmt.Sprintf("v%d", n))
				f.add(t, true, txbox.Message{Topic: "hand", Key: b, Payload: []byte(fmt.Sprintf("%s:%d", b, n))},
					txbox.Message{Topic: "hand", Payload: []byte(fmt.Sprintf("v%d:1", n))})
			}
			total += 2 * perKey
			testenv.Await(t, "the rows committed later published", func() (bool, string) {
				n := testenv.RelayStats(r).Published
				return n == total-waiting, fmt.Sprintf("%d published", n)
			})
			ctx := context.Background()
			testenv.Must(t, holder.Rollback(ctx), "release %s", held)
			testenv.Await(t, "every message published", func() (bool, string) {
				n := testenv.RelayStats(r).Published
				return n == total, fmt.Sprintf("%d published", n)
			})
			log.check(t, []string{"a"}, perKey)
			log.check(t, []string{b}, 2*perKey)
			log.check(t, loosePayloads, 1)
		})
	}
}

// A claim whose read of the lanes reaches its limit in lanes whose heads
// another transaction holds finds nothing, yet has not read the other
// lanes: the relay looks again instead of going idle. Every lane but
// key b's holds a key whose head is held, with a batch of rows behind it;
// only a read past those reaches b's rows. The relay polls once an hour
// and has no notifications.
func TestRelayReadsPastHeldLanesThatFillItsRead(t *testing.T) {
	t.Parallel()
	const batch = 10
	f := pgxFixture(t, 8)
	b := keyInLane(t, f, 63)
	var held []string
	for lane := range 63 {
		held = append(held, keyInLane(t, f, lane))
	}
	addKeyed(t, f, "fill", held, batch)
	addKeyed(t, f, "fill", []string{b}, batch)
	ctx := context.Background()
	holder, err := f.pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	t.Cleanup(func() { _ = holder.Rollback(ctx) })
	heads := make([]string, len(held))
	for i, k := range held {
		heads[i] = k + ":1"
	}
	tag, err := holder.Exec(ctx, "SELECT 1 FROM txbox_outbox WHERE convert_from(payload, 'UTF8') = ANY($1) FOR UPDATE", heads)
	testenv.Must(t, err, "hold the heads")
	if tag.RowsAffected() != int64(len(heads)) {
		t.Fatalf("held %d heads, want %d", tag.RowsAffected(), len(heads))
	}

	log := newRunLog(nil)
	r := f.newRelay(t, log, relay.Config{BatchSize: batch, PollInterval: time.Hour, DisableNotify: true})
	startRelay(t, r)
	testenv.Await(t, "key b's rows published", func() (bool, string) {
		n := testenv.RelayStats(r).Published
		return n == batch, fmt.Sprintf("%d published", n)
	})
	log.check(t, []string{b}, batch)
}

// keyInLane returns a key whose lane is lane.
func keyInLane(t *testing.T, f fixture, lane int) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("k%d", i); laneOf(t, f, k) == lane {
			return k
		}
	}
}
