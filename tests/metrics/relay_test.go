package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// pgOutbox migrates an outbox on pool and returns its writer.
func pgOutbox(t *testing.T, pool *pgxpool.Pool) (*txboxpgx.Driver, *txbox.Outbox[pgx.Tx]) {
	t.Helper()
	drv := txboxpgx.New(pool)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(context.Background())
	testenv.Must(t, err, "migrate up")
	ob, err := txbox.New(drv, txbox.Config{})
	testenv.Must(t, err, "txbox.New")
	return drv, ob
}

func add(t *testing.T, pool *pgxpool.Pool, ob *txbox.Outbox[pgx.Tx], msgs ...txbox.Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	testenv.Must(t, testenv.Err(ob.Add(ctx, tx, msgs...)), "add")
	testenv.Must(t, tx.Commit(ctx), "commit")
}

// gate holds the first Publish until open is closed, so that a test sees
// the backlog and the batch in flight; it keeps the natsjs publisher's
// capabilities (ConnectionChecker, DuplicateCounter, MessageChecker).
type gate struct {
	*natsjs.Publisher
	open chan struct{}
}

func (g *gate) Publish(ctx context.Context, msgs []txbox.Message) []error {
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	return g.Publisher.Publish(ctx, msgs)
}

// Every relay metric moves: the backlog by state and the oldest claimable
// and in-flight ages while a batch is held, then published, rejected, dead,
// invalid and broker-duplicate counts, the commit-to-ack histogram (rows
// committed a minute ago), claim and publish durations, batch sizes, the
// listener and connection gauges, and, once the broker is shut down, the
// failed rounds and unacked messages.
func TestRelayMetricsMove(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, _ := testenv.Postgres(t, 8)
	drv, ob := pgOutbox(t, pool)
	srv := testenv.EmbeddedNATS(t)
	nc, err := srv.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	prefix := testenv.Subject()
	_, err = natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: testenv.Name("S"), Subjects: []string{prefix + "ok.>"}})
	testenv.Must(t, err, "stream")
	np, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	// The broker already holds dup-1 (a relay died before marking it).
	if errs := np.Publish(ctx, []txbox.Message{{ID: "dup-1", Topic: prefix + "ok.a", Payload: []byte("d")}}); errs != nil {
		t.Fatal(errs)
	}

	a, noStream, bad := prefix+"ok.a", prefix+"nostream", prefix+"ok..bad"
	for i := range 5 {
		add(t, pool, ob, txbox.Message{Topic: a, Payload: []byte{byte('0' + i)}})
	}
	add(t, pool, ob, txbox.Message{ID: "dup-1", Topic: a, Payload: []byte("d")},
		txbox.Message{Topic: noStream, Payload: []byte("r")}, // rejected: no stream captures it
		txbox.Message{Topic: bad, Payload: []byte("i")},      // invalid: an empty subject token
		txbox.Message{Topic: a, Key: "k", Payload: []byte("k1")},
		txbox.Message{Topic: a, Key: "k", Payload: []byte("k2")},
		txbox.Message{Topic: a, Payload: []byte("later")})
	exec := func(sql string) {
		_, err := pool.Exec(ctx, sql)
		testenv.Must(t, err, "exec %s", sql)
	}
	exec(`UPDATE txbox_outbox SET created_at = now() - interval '60 seconds'`)
	exec(`UPDATE txbox_outbox SET dead_at = now(), attempts = 10, last_error = 'test' WHERE payload = 'k1'`) // parks k2
	exec(`UPDATE txbox_outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour' WHERE payload = 'later'`)

	m, reg := metricsFor(t)
	g := &gate{Publisher: np, open: make(chan struct{})}
	r, err := relay.New[pgx.Tx](drv, g, relaytest.With(relay.Config{Observer: m.Relay(),
		PollInterval: 20 * time.Millisecond, MaxAttempts: 2}, relaytest.Config{SampleInterval: 50 * time.Millisecond, RetryDelay: 10 * time.Millisecond}))
	testenv.Must(t, err, "relay.New")
	testenv.Must(t, r.Start(ctx), "start")
	t.Cleanup(func() { _ = r.Stop(context.Background()) })

	v := func(name string, labels ...string) float64 { return value(t, reg, name, labels...) }
	eventually(t, "the held batch's backlog sampled", func() bool {
		return v("txbox_relay_oldest_in_flight_age_seconds") >= 0.2
	})
	for state, want := range map[string]float64{"pending": 8, "retrying": 1, "parked": 1, "dead": 1} {
		if got := v("txbox_relay_backlog", "state", state); got != want {
			t.Errorf("txbox_relay_backlog{state=%q} = %v, want %v", state, got, want)
		}
	}
	if age := v("txbox_relay_oldest_claimable_age_seconds"); age < 60 || age > 120 {
		t.Errorf("oldest claimable age %vs, want about 60s", age)
	}
	close(g.open)

	eventually(t, "everything settled", func() bool {
		return v("txbox_relay_published_total", "topic", a) == 6 && v("txbox_relay_dead_total", "topic", noStream) == 1 &&
			v("txbox_relay_backlog", "state", "pending") == 0 && v("txbox_relay_backlog", "state", "dead") == 3
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"txbox_relay_rejected_total", []string{"topic", noStream}, 2},
		{"txbox_relay_invalid_total", []string{"topic", bad}, 1},
		{"txbox_relay_dead_total", []string{"topic", bad}, 1},
		{"txbox_relay_broker_duplicates_total", nil, 1},
		{"txbox_relay_commit_to_ack_seconds", nil, 6},
		{"txbox_relay_backlog", []string{"state", "retrying"}, 1},
		{"txbox_relay_backlog", []string{"state", "parked"}, 1},
		{"txbox_relay_broker_connected", nil, 1},
		{"txbox_relay_oldest_in_flight_age_seconds", nil, 0},
	} {
		if got := v(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if sum := histogramSum(t, reg, "txbox_relay_commit_to_ack_seconds"); sum < 6*60 {
		t.Errorf("commit-to-ack sum %vs, want at least 6 × 60s", sum)
	}
	for _, name := range []string{"txbox_relay_claim_duration_seconds", "txbox_relay_publish_duration_seconds", "txbox_relay_batch_size", "txbox_relay_last_sample_timestamp_seconds"} {
		if got := v(name); got <= 0 {
			t.Errorf("%s = %v, want > 0", name, got)
		}
	}
	eventually(t, "the listener gauge", func() bool { return v("txbox_relay_listening") == 1 })

	// The broker goes away: rounds fail at the publish, their messages go
	// back unacked, and the connection gauge drops.
	srv.Shutdown()
	add(t, pool, ob, txbox.Message{Topic: a, Payload: []byte("during")})
	r.Wake()
	eventually(t, "the outage counted", func() bool {
		return v("txbox_relay_rounds_failed_total", "stage", "publish") >= 1 && v("txbox_relay_unacked_total", "topic", a) >= 1 &&
			v("txbox_relay_broker_connected") == 0
	})
}
