package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/outboxsql"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// groupListeners returns the pids of the connections whose last statement
// was a LISTEN or UNLISTEN on the channel of one of tenants' tables: the
// group's listening connection.
func groupListeners(t *testing.T, pool *pgxpool.Pool, tenants ...tenant) []int32 {
	t.Helper()
	var pats []string
	for _, tn := range tenants {
		pats = append(pats, `LISTEN "txbox_`+tn.table+`"`)
	}
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE EXISTS (SELECT 1 FROM unnest($1::text[]) p WHERE query = p OR query = 'UN' || p)`, pats)
	testenv.Must(t, err, "pg_stat_activity")
	defer rows.Close()
	var pids []int32
	for rows.Next() {
		var pid int32
		testenv.Must(t, rows.Scan(&pid), "scan")
		pids = append(pids, pid)
	}
	testenv.Must(t, rows.Err(), "rows")
	return pids
}

// storeIdle reports whether store's last turn, per ev, succeeded and
// claimed nothing. A turn that claims rows disarms the store's doorbell
// before its Finished event.
func storeIdle(ev *events, store string) bool {
	all := ev.snapshot()
	for i := len(all) - 1; i >= 0; i-- {
		if e := all[i]; e.Store == store && (e.Kind == relay.EventStarted || e.Kind == relay.EventFinished) {
			return e.Kind == relay.EventFinished && e.Rows == 0 && e.Err == nil
		}
	}
	return false
}

// wakeTable is the doorbell table of x's outbox table.
func (x tenant) wakeTable() string { return x.table + "_wake" }

// waitIdleArmed waits until each of tns, stores of groups whose events ev
// records, is idle with its doorbell armed (testenv.WaitIdleArmed): only
// then does a writer's commit ring it.
func waitIdleArmed(t *testing.T, pool *pgxpool.Pool, ev *events, tns ...tenant) {
	t.Helper()
	var bells []testenv.Doorbell
	for _, x := range tns {
		bells = append(bells, testenv.Doorbell{Name: x.name, Wake: x.wakeTable(), Idle: func() bool { return storeIdle(ev, x.name) }})
	}
	testenv.WaitIdleArmed(t, pool, bells...)
}

// waitDelivered waits until none of tns holds an undelivered row, and
// fails naming the stores that still do.
func waitDelivered(t *testing.T, pool *pgxpool.Pool, what string, tns ...tenant) {
	t.Helper()
	testenv.Await(t, what, func() (bool, string) {
		var left []string
		for _, x := range tns {
			if n := x.pending(t); n > 0 {
				left = append(left, fmt.Sprintf("%s: %d (doorbell armed %v)", x.name, n, testenv.DoorbellArmed(t, pool, x.wakeTable())))
			}
		}
		return len(left) == 0, fmt.Sprintf("undelivered rows in %v", left)
	})
}

// A store polling once an hour is delivered soon after a commit from
// another connection, without Wake: the group's listening connection
// hears its notify trigger. The same store in a group without the
// listener (the control) still holds the row once the first is delivered
// and some seconds more.
func TestGroupNotifyWakesIdleStore(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	pub := publisher(t, nc)
	tn := pgTenants(t, pool, prefix, 2)
	heard, deaf := tn[0], tn[1]

	ev := &events{} // both groups' (the stores' names differ)
	g, err := relay.NewGroup(relay.GroupConfig{OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	rh := heard.newRelay(t, pub, relay.Config{PollInterval: time.Hour})
	testenv.Must(t, g.Add(context.Background(), relay.Store{Name: heard.name, Relay: rh}), "add")
	control, err := relay.NewGroup(relay.GroupConfig{DisableNotify: true, OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	rd := deaf.newRelay(t, pub, relay.Config{PollInterval: time.Hour})
	testenv.Must(t, control.Add(context.Background(), relay.Store{Name: deaf.name, Relay: rd}), "add")
	runGroup(t, g)
	runGroup(t, control)

	eventually(t, "listening", func() bool { return testenv.RelayStats(rh).Listening })
	// The control store's first round has run, found nothing and left it
	// waiting for its hourly poll; the heard store is idle with its
	// doorbell armed, so that the commit below rings it.
	eventually(t, "the control store's first round claimed nothing", func() bool { return storeIdle(ev, deaf.name) })
	// Its lane heartbeat wakes it once it holds its lanes; after that, one
	// more round (woken here) and nothing wakes it but its hourly poll.
	eventually(t, "the control store holds its lanes", func() bool { return len(testenv.RelayStats(rd).Lanes) == outboxsql.NumLanes })
	finished := func() int {
		n := 0
		for _, e := range ev.snapshot() {
			if e.Store == deaf.name && e.Kind == relay.EventFinished {
				n++
			}
		}
		return n
	}
	before := finished()
	rd.Wake()
	eventually(t, "the control store's round after its lanes claimed nothing", func() bool {
		return finished() > before && storeIdle(ev, deaf.name)
	})
	waitIdleArmed(t, pool, ev, heard)
	if testenv.RelayStats(rd).Listening {
		t.Fatal("a store of a group with DisableNotify says it listens")
	}
	heard.add(t, 1)
	deaf.add(t, 1)
	waitDelivered(t, pool, "delivered on notification", heard)
	time.Sleep(2 * time.Second)
	if deaf.pending(t) != 1 {
		t.Fatalf("the control store without the listener delivered its row: the test proves nothing")
	}
	if got := streamMsgs(t, s); got != 1 {
		t.Fatalf("stream holds %d messages, want 1", got)
	}
	// Many commits: each is heard (the doorbell is re-armed when idle, and
	// each commit waits for that).
	for i := range 5 {
		waitIdleArmed(t, pool, ev, heard)
		heard.add(t, 1)
		waitDelivered(t, pool, "delivered on notification again", heard)
		if got := streamMsgs(t, s); got != uint64(2+i) {
			t.Fatalf("stream holds %d messages, want %d", got, 2+i)
		}
	}
}

// Stores added to a running group are subscribed on the one listening
// connection of their database; a removed store is unsubscribed.
func TestGroupNotifyAddRemoveResubscribes(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	pub := publisher(t, nc)
	tn := pgTenants(t, pool, prefix, 3)

	ev := &events{}
	g, err := relay.NewGroup(relay.GroupConfig{OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	runGroup(t, g)
	var rs []*relay.Relay
	for _, x := range tn {
		r := x.newRelay(t, pub, relay.Config{PollInterval: time.Hour})
		testenv.Must(t, g.Add(context.Background(), relay.Store{Name: x.name, Relay: r}), "add %s", x.name)
		rs = append(rs, r)
		eventually(t, x.name+" listening", func() bool { return testenv.RelayStats(r).Listening })
	}
	waitIdleArmed(t, pool, ev, tn...)
	for _, x := range tn {
		x.add(t, 1)
	}
	waitDelivered(t, pool, "all delivered on notification", tn...)
	ctx := context.Background()
	if pids := groupListeners(t, pool, tn...); len(pids) != 1 {
		t.Fatalf("%d connections listen for the group's stores, want 1 for the database", len(pids))
	}

	testenv.Must(t, g.Remove(ctx, tn[1].name), "remove")
	if testenv.RelayStats(rs[1]).Listening {
		t.Fatal("a removed store says it listens")
	}
	// After the UNLISTEN, the channel of the removed store is not heard:
	// arm its doorbell by hand, commit, and see that nothing delivers it,
	// while the other stores are still heard.
	eventually(t, "unlistened", func() bool {
		var n int
		testenv.Must(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
			`UNLISTEN "txbox_`+tn[1].table+`"`).Scan(&n), "pg_stat_activity")
		return n == 1
	})
	tn[1].exec(t, "UPDATE %s_wake SET armed = true")
	// The remaining stores delivered a row a moment ago: they arm their
	// doorbells again once idle, and only then do writers notify.
	waitIdleArmed(t, pool, ev, tn[0], tn[2])
	tn[1].add(t, 1)
	tn[0].add(t, 1)
	tn[2].add(t, 1)
	waitDelivered(t, pool, "the remaining stores delivered", tn[0], tn[2])
	time.Sleep(time.Second)
	if tn[1].pending(t) != 1 {
		t.Fatal("the removed store's row was delivered")
	}
	// Added back, it is subscribed again and catches up.
	testenv.Must(t, g.Add(ctx, relay.Store{Name: tn[1].name, Relay: rs[1]}), "add back")
	eventually(t, "listening again", func() bool { return testenv.RelayStats(rs[1]).Listening })
	waitDelivered(t, pool, "the re-added store caught up", tn[1])
	waitIdleArmed(t, pool, ev, tn[1])
	tn[1].add(t, 1)
	waitDelivered(t, pool, "re-added store delivered on notification", tn[1])
	if got := streamMsgs(t, s); got != 7 {
		t.Fatalf("stream holds %d messages, want 7", got)
	}
	if pids := groupListeners(t, pool, tn...); len(pids) != 1 {
		t.Fatalf("%d connections listen for the group's stores, want 1", len(pids))
	}
}

// Cutting the group's listening connection does not stall anything: the
// group reconnects, and a commit made meanwhile or after is delivered
// without Wake.
func TestGroupNotifyConnectionLostRecovers(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Postgres(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	stream(t, nc, prefix, jetstream.StreamConfig{})
	pub := publisher(t, nc)
	tn := pgTenants(t, pool, prefix, 2)

	ev := &events{}
	g, err := relay.NewGroup(relay.GroupConfig{OnEvent: ev.on})
	testenv.Must(t, err, "NewGroup")
	var rs []*relay.Relay
	for _, x := range tn {
		r := x.newRelay(t, pub, relaytest.With(relay.Config{PollInterval: time.Hour}, relaytest.Config{BackoffMax: 200 * time.Millisecond}))
		testenv.Must(t, g.Add(context.Background(), relay.Store{Name: x.name, Relay: r}), "add %s", x.name)
		rs = append(rs, r)
	}
	runGroup(t, g)
	for _, r := range rs {
		eventually(t, "listening", func() bool { return testenv.RelayStats(r).Listening })
	}
	pids := groupListeners(t, pool, tn...)
	if len(pids) != 1 {
		t.Fatalf("%d listening connections, want 1", len(pids))
	}
	// tn[0]'s row commits while nobody listens, and is caught up after
	// the reconnect. The reconnecting listener resets (disarms) each
	// doorbell before it listens again; a transaction holding tn[0]'s
	// doorbell table in SHARE mode keeps it from doing so, and from
	// listening on tn[0]'s channel, until the loss has been noticed and
	// the row committed. (A row whose INSERT ran disarmed and that
	// committed after the caught-up store's last look would wait for the
	// hourly poll.)
	ctx := context.Background()
	hold, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, "LOCK TABLE "+tn[0].wakeTable()+" IN SHARE MODE")
	testenv.Must(t, err, "lock the doorbell of %s", tn[0].name)
	var ok bool
	testenv.Must(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pids[0]).Scan(&ok), "terminate")
	if !ok {
		t.Fatal("pg_terminate_backend failed")
	}
	tn[0].add(t, 1) // nobody listens: caught up after reconnect
	eventually(t, "the loss noticed", func() bool { return testenv.RelayStats(rs[0]).ListenFailures >= 1 })
	testenv.Must(t, hold.Rollback(ctx), "unlock the doorbell")
	eventually(t, "listening again", func() bool { return testenv.RelayStats(rs[0]).Listening && testenv.RelayStats(rs[1]).Listening })
	waitDelivered(t, pool, "caught up after reconnect", tn[0])
	// The listener disarmed tn[1]'s doorbell too: write once it is armed
	// again, so that the commit rings it.
	waitIdleArmed(t, pool, ev, tn[1])
	tn[1].add(t, 1)
	waitDelivered(t, pool, "delivered on notification after reconnect", tn[1])
	if got := groupListeners(t, pool, tn...); len(got) != 1 || got[0] == pids[0] {
		t.Fatalf("listening connections after reconnect: %v (the cut one was %d)", got, pids[0])
	}
}
