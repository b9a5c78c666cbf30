package metrics_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/internal/relaytest"
	"github.com/txbox/txbox/natsjs"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
)

// /readyz reads ready for a healthy relay, and not ready, naming why, while
// its database is cut off (a TCP proxy in front of PostgreSQL) and while its
// broker is gone (a private embedded NATS, shut down); it is ready again
// when each comes back. /healthz answers throughout, and the cut database
// shows in the failed claims and the failed samples.
func TestReadyzDatabaseAndBroker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, proxy, _ := testenv.PostgresThrough(t, 4)
	drv, ob := pgOutbox(t, pool)
	srv := testenv.EmbeddedNATS(t)
	nc, err := srv.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	testenv.Must(t, err, "connect")
	t.Cleanup(nc.Close)
	prefix := testenv.Subject()
	_, err = natsjs.EnsureStream(ctx, nc, natsjs.StreamConfig{Name: testenv.Name("S"), Subjects: []string{prefix + ">"}})
	testenv.Must(t, err, "stream")
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	m, reg := metricsFor(t)
	r, err := relay.New[pgx.Tx](drv, pub, relaytest.With(relay.Config{Observer: m.Relay(),
		PollInterval: 20 * time.Millisecond, DisableNotify: true}, relaytest.Config{SampleInterval: 50 * time.Millisecond}))
	testenv.Must(t, err, "relay.New")
	web := serve(t, reg, health.RelayCheck("relay", func() *relay.Relay { return r }))

	if code, body := probe(t, web, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not running") {
		t.Fatalf("before Start: /readyz %d %s, want 503 naming the relay not running", code, body)
	}
	testenv.Must(t, r.Start(ctx), "start")
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	add(t, pool, ob, txbox.Message{Topic: prefix + "a", Payload: []byte("1")})
	ready := func() bool { code, _ := probe(t, web, "/readyz"); return code == http.StatusOK }
	eventually(t, "ready", ready)

	proxy.Cut()
	eventually(t, "not ready with the database cut", func() bool {
		code, body := probe(t, web, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "database unreachable")
	})
	if code, _ := probe(t, web, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d while the database is cut, want 200: the process is alive", code)
	}
	eventually(t, "failed claims and samples counted", func() bool {
		return value(t, reg, "txbox_relay_rounds_failed_total", "stage", "claim") >= 1 && value(t, reg, "txbox_relay_sample_errors_total") >= 1
	})
	proxy.Resume()
	eventually(t, "ready after the database's return", ready)

	srv.Shutdown()
	eventually(t, "not ready with the broker shut down", func() bool {
		code, body := probe(t, web, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "broker not connected") &&
			strings.Contains(body, `"broker_connected": false`)
	})
	eventually(t, "/metrics says the broker is not connected", func() bool {
		code, body := probe(t, web, "/metrics")
		return code == http.StatusOK && strings.Contains(body, "txbox_relay_broker_connected 0")
	})
}

// The zombie of issue 13: a relay whose NATS connection was closed for good
// stops (txbox.ErrPublisherClosed) and reads as not ready, even before it
// notices, since the publisher reports the connection down.
func TestReadyzClosedBrokerConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, _ := testenv.Postgres(t, 4)
	drv, _ := pgOutbox(t, pool)
	srv := testenv.EmbeddedNATS(t)
	nc, err := srv.Connect()
	testenv.Must(t, err, "connect")
	pub, err := natsjs.NewPublisher(nc, natsjs.PublisherConfig{})
	testenv.Must(t, err, "publisher")
	r, err := relay.New[pgx.Tx](drv, pub, relay.Config{PollInterval: 20 * time.Millisecond})
	testenv.Must(t, err, "relay.New")
	testenv.Must(t, r.Start(ctx), "start")
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	_, reg := metricsFor(t)
	web := serve(t, reg, health.RelayCheck("relay", func() *relay.Relay { return r }))
	eventually(t, "ready", func() bool { code, _ := probe(t, web, "/readyz"); return code == http.StatusOK })

	nc.Close()
	code, body := probe(t, web, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "broker not connected") {
		t.Fatalf("/readyz with the NATS connection closed: %d %s, want 503 broker not connected", code, body)
	}
	if err := testenv.RelayStats(r).Ready(); err == nil {
		t.Fatal("Stats.Ready is nil with the NATS connection closed")
	}
}
