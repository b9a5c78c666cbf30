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
}

// channelName returns the channel of a table: 'txbox_' || schema || '.' || table.
func channelName(ctx context.Context, pool *pgxpool.Pool, schema, table string) (string, error) {
	var s string
	if schema == "" {
		if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&s); err != nil {
			return "", err
		}
	} else {
		s = schema
	}
	return "txbox_" + s + "." + table, nil
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
