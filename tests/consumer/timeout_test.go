package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox/consumer"
	"github.com/txbox/txbox/tests/testenv"
)

// A handler stuck on one message (it waits on its context, as a call
// without a deadline waits for ever) holds its only worker no longer than
// its Timeout (HandlerConfig's, over Config.HandlerTimeout): the other
// messages are all applied, once each, and the stuck one is dead-lettered
// after MaxDeliveries, its error naming the timeout. For inbox handlers
// alone and in batches, and at-least-once ones. Without the timeout the
// first delivery holds the worker for good and nothing else is applied.
func TestHandlerTimeoutFreesTheWorker(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"nats", "rabbitmq"} {
		for _, mode := range []string{"inbox", "inbox-batched", "at-least-once"} {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				t.Parallel()
				handlerTimeout(t, kind, mode)
			})
		}
	}
}

func handlerTimeout(t *testing.T, kind, mode string) {
	d := pgxDB(t, 8)
	d.migrateAll(t)
	d.exec(t, "CREATE TABLE applied (id text NOT NULL)")
	b := newBroker(t, kind)
	all := append([]string{"stuck"}, ids("m", 20)...)
	publishAll(t, b, all) // before Start: the stuck one comes first
	batch := consumer.BatchConfig{Size: 1}
	if mode == "inbox-batched" {
		batch = consumer.BatchConfig{Size: 8, Wait: 50 * time.Millisecond}
	}
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Concurrency: 1, MaxDeliveries: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, HandlerTimeout: time.Hour,
		Batch: batch, Logger: quiet})
	testenv.Must(t, err, "New")
	var runs runCounter
	causes := make(chan error, 3)
	apply := func(ctx context.Context, exec func(context.Context, string, ...any) error, msg consumer.Message) error {
		if runs.add(msg.ID); msg.ID == "stuck" {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return fmt.Errorf("waiting on a reply: %w", ctx.Err())
		}
		return exec(ctx, "INSERT INTO applied (id) VALUES ($1)", msg.ID)
	}
	// The handler's own Timeout wins over the Config's hour.
	hc := consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders"), Timeout: time.Second}
	if mode == "at-least-once" {
		pool := d.drv.Pool()
		testenv.Must(t, c.HandleAtLeastOnce(hc, func(ctx context.Context, msg consumer.Message) error {
			return apply(ctx, func(ctx context.Context, q string, args ...any) error {
				_, err := pool.Exec(ctx, q, args...)
				return err
			}, msg)
		}), "register")
	} else {
		testenv.Must(t, c.HandleInbox(hc, func(ctx context.Context, tx pgx.Tx, msg consumer.Message) error {
			return apply(ctx, func(ctx context.Context, q string, args ...any) error { _, err := tx.Exec(ctx, q, args...); return err }, msg)
		}), "register")
	}
	testenv.Must(t, c.Start(context.Background()), "start")
	t.Cleanup(func() { // bounded: a handler that never times out must not hang the test
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})

	testenv.Await(t, "the others applied and the stuck one dead-lettered", func() (bool, string) {
		st := c.Stats()
		return st.Handled == 20 && st.DeadLettered == 1, fmt.Sprintf("stats %+v", st)
	})
	if st := c.Stats(); st.TimedOut != 3 || st.DatabaseFailures != 0 {
		t.Fatalf("stats %+v: want 3 runs timed out, no database failure", st)
	}
	if n, distinct := d.count(t, "SELECT count(*) FROM applied"), d.count(t, "SELECT count(DISTINCT id) FROM applied"); n != 20 || distinct != 20 {
		t.Fatalf("%d rows of %d messages applied, want the 20 others once each", n, distinct)
	}
	if got := runs.get("stuck"); got != 3 {
		t.Fatalf("the stuck message ran %d times, want 3 (MaxDeliveries)", got)
	}
	if cause := <-causes; !errors.Is(cause, consumer.ErrHandlerTimeout) {
		t.Fatalf("the stuck handler's context ended with the cause %v, want ErrHandlerTimeout", cause)
	}
	var dl map[string]map[string]string
	eventually(t, "the dead letter stored", func() bool { dl = b.deadLetters(t, "orders"); return len(dl) == 1 })
	if e := dl["stuck"][b.errHeader]; !strings.Contains(e, "ran past its timeout (1s)") || !strings.Contains(e, "waiting on a reply") {
		t.Fatalf("the dead letter's error %q does not name the timeout and the handler's error", e)
	}
}

// A negative timeout is refused: the Config's by New, a handler's by
// Validate (and Start), naming it.
func TestHandlerTimeoutNegative(t *testing.T) {
	t.Parallel()
	d := pgxDB(t, 4)
	d.migrateAll(t)
	b := newBroker(t, "nats")
	if _, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, HandlerTimeout: -time.Second}); !errors.Is(err, consumer.ErrInvalidConfig) || !strings.Contains(err.Error(), "HandlerTimeout") {
		t.Fatalf("New with a negative HandlerTimeout: %v", err)
	}
	c, err := consumer.New(d.drv, consumer.Config{Broker: b.sub, Logger: quiet})
	testenv.Must(t, err, "New")
	testenv.Must(t, c.HandleInbox(consumer.HandlerConfig{Name: "apply", Binding: b.binding("orders"), Timeout: -time.Second},
		func(context.Context, pgx.Tx, consumer.Message) error { return nil }), "register")
	err = c.Start(context.Background())
	if err == nil {
		_ = c.Stop(context.Background())
	}
	if !errors.Is(err, consumer.ErrStartup) || !strings.Contains(err.Error(), "Timeout") {
		t.Fatalf("Start with a handler's negative Timeout: %v", err)
	}
}
