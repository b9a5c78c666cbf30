package migrate_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// A schema and table whose 'txbox_<schema>.<table>' channel is over
// PostgreSQL's 63 bytes still get their wake-up: the trigger and the relay
// derive the same short channel. Without it the armed doorbell made
// pg_notify fail the INSERT ("channel name too long") and the relay log
// "notifications lost" forever. The poll interval is an hour: only a
// notification delivers the rows. Each is written once the relay is idle
// with its doorbell armed, so that its commit rings it.
func TestLongNamesNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Postgres(t, 8)
	schema := testenv.Name("txnotify_with_a_rather_long_schema") // 47 bytes
	table := "outbox_table_with_a_long_name_too"                 // 33 bytes
	if n := len("txbox_" + schema + "." + table); n <= 63 {
		t.Fatalf("channel name of %d bytes: the test needs more than 63", n)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	drv := txboxpgx.New(pool)
	m, err := txboxmigrate.New(drv, txboxmigrate.Config{Schema: schema, OutboxTable: table})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "up")

	var logs testenv.Buffer
	pub := &drivertest.Recorder{}
	rounds := &testenv.RoundWatcher{}
	r, err := relay.New(drv, pub, relay.Config{Schema: schema, Table: table, PollInterval: time.Hour, Observer: rounds,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	testenv.Must(t, err, "relay")
	testenv.Must(t, r.Start(ctx), "start")
	defer func() { testenv.Must(t, r.Stop(ctx), "stop") }()
	ob, err := txbox.New(drv, txbox.Config{Schema: schema, Table: table})
	testenv.Must(t, err, "outbox")
	testenv.Await(t, "the relay listening", func() (bool, string) {
		return testenv.RelayStats(r).Listening, "log:\n" + logs.String()
	})
	bell := testenv.Doorbell{Name: "the relay", Wake: schema + "." + table + "_wake", Idle: rounds.Idle}
	for i := 0; i < 3; i++ {
		testenv.WaitIdleArmed(t, pool, bell)
		testenv.Must(t, testenv.Err(ob.AddNoTx(ctx, txbox.Message{Topic: "t", Payload: []byte("x")})), "add %d", i)
		testenv.Await(t, fmt.Sprintf("message %d delivered with an hour's poll interval (a notification waking the relay)", i), func() (bool, string) {
			return len(pub.Published()) > i, "log:\n" + logs.String()
		})
	}
	if strings.Contains(logs.String(), "notifications lost") {
		t.Fatalf("the relay lost its notifications:\n%s", logs.String())
	}
}
