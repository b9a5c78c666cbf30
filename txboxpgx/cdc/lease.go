package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lease is the one-active-reader lease of a slot: a session-level advisory
// lock, held by a connection taken out of the pool for good. The server
// releases it the moment that session ends: when the reader exits or is
// killed (its socket closes), when the server restarts, and when the
// reader stops answering (its session has idle_session_timeout set to the
// lease timeout and a heartbeat every third of it). A standby tries the
// lock every third of the lease timeout.
//
// The slot itself admits one reader at a time (START_REPLICATION fails
// while another walsender holds it); the lease keeps standbys quiet and
// says who reads.
type lease struct {
	conn *pgx.Conn
	slot string
}

// acquireLease waits until it holds the slot's lease, or ctx ends.
func acquireLease(ctx context.Context, pool *pgxpool.Pool, slot string, timeout time.Duration, waiting func()) (*lease, error) {
	pooled, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pooled.Hijack() // never goes back to the pool: it holds a lock
	l := &lease{conn: conn, slot: slot}
	ok := false
	defer func() {
		if !ok {
			l.release()
		}
	}()
	// A session that stops sending its heartbeat ends, and with it the lock.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`SET idle_session_timeout = %d`, timeout.Milliseconds())); err != nil {
		return nil, fmt.Errorf("lease session: %w", err)
	}
	told := false
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('txbox_cdc'), hashtext($1))`, slot).Scan(&got); err != nil {
			return nil, fmt.Errorf("lease on slot %s: %w", slot, err)
		}
		if got {
			ok = true
			return l, nil
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(timeout / 3):
		}
	}
}

// heartbeat checks that the lease's session is alive and still holds the
// lock, and resets its idle timer.
func (l *lease) heartbeat(ctx context.Context) error {
	var held bool
	err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
	    AND classid::int = hashtext('txbox_cdc') AND objid::int = hashtext($1) AND granted)`, l.slot).Scan(&held)
	if err != nil {
		return fmt.Errorf("lease on slot %s lost: %w", l.slot, err)
	}
	if !held {
		return fmt.Errorf("lease on slot %s lost: the lock is no longer held", l.slot)
	}
	return nil
}

func (l *lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.conn.Close(ctx) // ends the session, and the lock with it
}
