package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/drivertest"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
	"github.com/txbox/txbox/txboxpgx"
)

// A start-up check stalled behind another session's lock on the outbox
// table (another tool's migration holding it, say) and cancelled by the
// server's statement_timeout (SQLSTATE 57014: a timeout, not the caller's
// context) could not check the table: that is no finding about it.
// relay.Group.Add returns a transient error, so that its caller
// (relay/supervise) retries the store instead of leaving it out for good,
// and Validate retries until the lock is released, then finds the table
// sound.
func TestStartupCheckStalledByALock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct, schema := testenv.Postgres(t, 2)
	m, err := txboxmigrate.New(txboxpgx.New(direct), txboxmigrate.Config{})
	testenv.Must(t, err, "txboxmigrate.New")
	_, err = m.Up(ctx)
	testenv.Must(t, err, "up")
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	testenv.Must(t, err, "parse")
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "300ms"
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	testenv.Must(t, err, "pool")
	t.Cleanup(pool.Close)
	holder, err := direct.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, "LOCK TABLE txbox_outbox IN ACCESS EXCLUSIVE MODE")
	testenv.Must(t, err, "lock")
	drv := txboxpgx.New(pool)
	var logs testenv.Buffer
	r, err := relay.New[pgx.Tx](drv, &drivertest.Recorder{}, relay.Config{DisableNotify: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	testenv.Must(t, err, "relay")
	g := quietGroup(t)
	addRetried(t, ctx, g, r, func(err error) bool { return txboxdriver.IsTransientFor(drv, err) }, "start-up check stalled past the statement timeout")

	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Validate(vctx) }()
	testenv.Await(t, "Validate retrying the stalled check twice", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("Validate returned while the table is locked: %v\n%s", err, logs.String())
		default:
		}
		n := strings.Count(logs.String(), "trying again")
		return n >= 2, fmt.Sprintf("%d retries", n)
	})
	testenv.Must(t, holder.Rollback(ctx), "release the lock")
	var verr error
	testenv.Await(t, "Validate once the lock is released", func() (bool, string) {
		select {
		case verr = <-done:
			return true, ""
		default:
			return false, logs.String()
		}
	})
	if verr != nil {
		t.Fatalf("Validate once the lock is released: %v\n%s", verr, logs.String())
	}
}

// quietGroup is a relay group that logs nothing.
func quietGroup(t *testing.T) *relay.Group {
	t.Helper()
	g, err := relay.NewGroup(relay.GroupConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	testenv.Must(t, err, "group")
	return g
}

// addRetried adds r to g as store "s" and fails the test unless Add
// returns an error transient says the caller retries, not a StartupError
// (a finding that would leave the store out).
func addRetried(t *testing.T, ctx context.Context, g *relay.Group, r *relay.Relay, transient func(error) bool, what string) {
	t.Helper()
	err := g.Add(ctx, relay.Store{Name: "s", Relay: r})
	var se *txbox.StartupError
	if err == nil || errors.As(err, &se) || !transient(err) {
		t.Fatalf("%s: %v; want a transient error, no finding", what, err)
	}
	t.Logf("%s: %v", what, err)
}
