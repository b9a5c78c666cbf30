package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxpgx"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
)

// relayDoorbell is the doorbell of the fixture's outbox table, rung for a
// relay whose Observer is rounds (see testenv.WaitIdleArmed).
func relayDoorbell(rounds *testenv.RoundWatcher) testenv.Doorbell {
	return testenv.Doorbell{Name: "the relay", Wake: "txbox_outbox_wake", Idle: rounds.Idle}
}

// With a poll interval of an hour, only a notification can make the relay
// deliver a message committed after it went idle. Each is committed once
// the relay is idle with its doorbell armed, so that the commit rings it.
func TestNotifyWakesIdleRelay(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	rounds := &testenv.RoundWatcher{}
	r := f.newRelay(t, publisher(t, nc), relay.Config{PollInterval: time.Hour, Observer: rounds})
	startRelay(t, r)
	eventually(t, "listening", func() bool { return testenv.RelayStats(r).Listening })
	testenv.WaitIdleArmed(t, f.pool, relayDoorbell(rounds))
	f.add(t, true, txbox.Message{Topic: prefix + "n", Payload: []byte("1")})
	eventually(t, "delivered on notification", func() bool { return streamMsgs(t, s) == 1 })
	testenv.WaitIdleArmed(t, f.pool, relayDoorbell(rounds))
	f.addNoTx(t, txbox.Message{Topic: prefix + "n", Payload: []byte("2")})
	eventually(t, "delivered on notification", func() bool { return streamMsgs(t, s) == 2 })
}

// A transaction whose INSERT ran while the doorbell was disarmed sends no
// notification, however late it commits. Committed after the relay armed
// the doorbell and looked once more, its row was left for the next poll
// (an hour here); the armed relay looks again after waits that double, and
// delivers it.
func TestNotifyMissedWriteIsFoundWithoutAPoll(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	ctx := context.Background()
	if testenv.DoorbellArmed(t, f.pool, "txbox_outbox_wake") {
		t.Fatal("the doorbell is armed before any relay ran")
	}
	tx, err := f.pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = tx.Rollback(ctx) }()
	testenv.Must(t, testenv.Err(f.outbox.Add(ctx, tx, txbox.Message{Topic: prefix + "m", Payload: []byte("1")})), "add")

	rounds := &testenv.RoundWatcher{}
	r := f.newRelay(t, publisher(t, nc), relay.Config{PollInterval: time.Hour, Observer: rounds})
	startRelay(t, r)
	eventually(t, "listening", func() bool { return testenv.RelayStats(r).Listening })
	testenv.WaitIdleArmed(t, f.pool, relayDoorbell(rounds))
	testenv.Must(t, tx.Commit(ctx), "commit")
	eventually(t, "the row committed after the arming delivered", func() bool { return streamMsgs(t, s) == 1 })
}

// When the start-up check finds that notifications do not arrive, the relay
// says so and polls.
func TestNotifyCheckFailsThenPolls(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	cfg := relaytest.With(relay.Config{PollInterval: 20 * time.Millisecond}, relaytest.Config{NotifyProbeTimeout: 100 * time.Millisecond, BackoffMax: time.Hour})
	// The relay's listening connection listens elsewhere, as behind a
	// pooler in transaction mode: the probe never reaches it.
	r, err := relay.New[pgx.Tx](deafDriver{txboxpgx.New(f.pool)}, publisher(t, nc), cfg)
	testenv.Must(t, err, "relay.New")
	startRelay(t, r)
	eventually(t, "the notification check failed", func() bool { return testenv.RelayStats(r).ListenFailures >= 1 })
	if testenv.RelayStats(r).Listening {
		t.Fatal("relay claims to listen though the check failed")
	}
	f.add(t, true, txbox.Message{Topic: prefix + "p", Payload: []byte("1")})
	eventually(t, "delivered by polling", func() bool { return streamMsgs(t, s) == 1 })
}

// When the listening connection dies, the relay polls until it listens
// again, then notifications wake it again. The listener disarms the
// doorbell before it listens again: the row is committed once the relay
// has armed it again.
func TestNotifyConnectionLostFallsBackAndRecovers(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	nc := testenv.NATS(t)
	prefix := testenv.Subject()
	s := stream(t, nc, prefix, jetstream.StreamConfig{})
	rounds := &testenv.RoundWatcher{}
	r := f.newRelay(t, publisher(t, nc), relaytest.With(relay.Config{PollInterval: time.Hour, Observer: rounds}, relaytest.Config{BackoffMax: 50 * time.Millisecond}))
	startRelay(t, r)
	eventually(t, "listening", func() bool { return testenv.RelayStats(r).Listening })
	ctx := context.Background()
	var killed int
	err := f.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN "txbox_' || current_schema() || '.%'`).Scan(&killed)
	testenv.Must(t, err, "terminate the listener")
	if killed != 1 {
		t.Fatalf("terminated %d listeners, want 1", killed)
	}
	eventually(t, "the loss noticed", func() bool { return testenv.RelayStats(r).ListenFailures >= 1 })
	eventually(t, "listening again", func() bool { return testenv.RelayStats(r).Listening })
	testenv.WaitIdleArmed(t, f.pool, relayDoorbell(rounds))
	f.add(t, true, txbox.Message{Topic: prefix + "r", Payload: []byte("1")})
	eventually(t, "delivered on notification after reconnect", func() bool { return streamMsgs(t, s) == 1 })
}

// Writers notify only while a relay has armed the doorbell, and a
// transaction of many rows notifies once.
func TestDoorbellNotifiesOnlyWhenArmed(t *testing.T) {
	t.Parallel()
	f := pgxFixture(t, 8)
	ctx := context.Background()
	schema := f.schema(t)
	channel := "txbox_" + schema + ".txbox_outbox"
	conn, err := f.pool.Acquire(ctx)
	testenv.Must(t, err, "acquire")
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN "`+channel+`"`)
	testenv.Must(t, err, "listen")

	many := make([]txbox.Message, 50)
	for i := range many {
		many[i] = txbox.Message{Topic: "t", Payload: []byte("x")}
	}
	f.add(t, true, many...) // disarmed: no notification
	f.exec(t, "INSERT INTO txbox_outbox_wake (one, armed) VALUES (true, true) ON CONFLICT (one) DO UPDATE SET armed = true")
	f.add(t, true, many...) // armed: one notification for 50 rows
	f.addNoTx(t, many[0])   // armed: one more
	f.exec(t, "SELECT pg_notify($1, 'sentinel')", channel)

	got := 0
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		testenv.Must(t, err, "wait")
		if n.Payload == "sentinel" {
			break
		}
		got++
	}
	if got != 2 {
		t.Fatalf("%d notifications, want 2: none while disarmed, one per armed transaction", got)
	}
}

// deafDriver's listening connections listen on a channel nobody notifies.
type deafDriver struct{ *txboxpgx.Driver }

func (d deafDriver) ListenChannels(ctx context.Context) (txboxdriver.Channels, error) {
	c, err := d.Driver.ListenChannels(ctx)
	return deafChannels{c}, err
}

type deafChannels struct{ txboxdriver.Channels }

func (c deafChannels) Listen(ctx context.Context, _ string) error {
	return c.Channels.Listen(ctx, "nobody_listens_here")
}
