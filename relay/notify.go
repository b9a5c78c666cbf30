package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgxPooler is implemented by drivers that can give the relay a pgx pool
// for LISTEN (txboxpgx.Driver).
type pgxPooler interface{ PgxPool() *pgxpool.Pool }

// listener wakes the relay on PostgreSQL notifications from the outbox
// table's notify trigger. It holds one connection of the pool.
type listener struct {
	r       *Relay
	pool    *pgxpool.Pool
	channel string // the channel the trigger notifies
	probe   string // the channel the start-up check notifies (== channel but in tests)
	wake    string // the quoted doorbell table
}

// arm asks writers to notify: the relay is idle.
func (l *listener) arm(ctx context.Context) error {
	_, err := l.pool.Exec(ctx, "INSERT INTO "+l.wake+" (one, armed) VALUES (true, true) ON CONFLICT (one) DO UPDATE SET armed = true")
	return err
}

// disarm tells writers to stop notifying: a relay is at work.
func (l *listener) disarm(ctx context.Context) {
	if _, err := l.pool.Exec(ctx, "UPDATE "+l.wake+" SET armed = false WHERE armed"); err != nil && ctx.Err() == nil {
		l.r.log.Warn("txbox relay: cannot disarm the wake-up doorbell", "err", err)
	}
}

// resolveSchema returns schema, or the connection's current schema.
func resolveSchema(ctx context.Context, pool *pgxpool.Pool, schema string) (string, error) {
	if schema != "" {
		return schema, nil
	}
	err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema)
	return schema, err
}

// run listens until ctx ends, reconnecting with backoff; while it is not
// listening the relay polls as usual.
func (l *listener) run(ctx context.Context) {
	var backoff time.Duration
	for ctx.Err() == nil {
		err := l.listenOnce(ctx)
		l.r.notifyActive.Store(false)
		if ctx.Err() != nil {
			return
		}
		l.r.listenFails.Add(1)
		backoff = nextBackoff(backoff, l.r.cfg.BackoffMax)
		l.r.log.Warn("txbox relay: notifications lost; polling every poll interval until they are back", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

func (l *listener) listenOnce(ctx context.Context) error {
	pooled, err := l.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection that was listening is not returned to the pool.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	// The doorbell table comes with migration 3; without it writers
	// never notify.
	if _, err := l.pool.Exec(ctx, "UPDATE "+l.wake+" SET armed = false WHERE armed"); err != nil {
		return fmt.Errorf("wake-up table missing (run txbox migrate up): %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Verify that a notification sent through the pool, as the writers'
	// are, reaches this connection (behind PgBouncer in transaction mode it
	// does not).
	token := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	if _, err := l.pool.Exec(ctx, "SELECT pg_notify($1, $2)", l.probe, token); err != nil {
		return fmt.Errorf("probe notification: %w", err)
	}
	wait, cancel := context.WithTimeout(ctx, l.r.cfg.NotifyProbeTimeout)
	for {
		n, err := conn.WaitForNotification(wait)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("no probe notification within %s (is the database behind a pooler in transaction mode?): %w", l.r.cfg.NotifyProbeTimeout, err)
		}
		if n.Payload == token {
			break
		}
	}
	cancel()
	l.r.notifyActive.Store(true)
	l.r.Wake() // catch up on what was committed while nobody listened
	l.r.log.Debug("txbox relay: listening for notifications", "channel", l.channel)
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		l.r.Wake()
	}
}
