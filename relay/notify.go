package relay

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox/internal/sqlname"
	"github.com/txbox/txbox/txboxdriver"
)

// listener is what a relay's Group needs to wake the relay on PostgreSQL
// notifications from the outbox table's notify trigger, through a driver
// that is a txboxdriver.ChannelListener (see dbListener): the channel, and the
// doorbell table that asks writers to notify.
type listener struct {
	r       *Relay
	chans   txboxdriver.ChannelListener
	pool    txboxdriver.Pool
	channel string // the channel the trigger notifies
	wake    string // the quoted doorbell table
	// wasReset is set when reset disarmed the doorbell table, which makes a
	// doorbell's armed stale; the doorbell clears it (see doorbell.sync).
	wasReset atomic.Bool
}

// arm asks writers to notify: the relay is idle.
func (l *listener) arm(ctx context.Context) error {
	_, err := l.pool.Exec(ctx, "INSERT INTO "+l.wake+" AS w (one, armed) VALUES (true, true) ON CONFLICT (one) DO UPDATE SET armed = true WHERE NOT w.armed")
	return err
}

// disarm tells writers to stop notifying: a relay is at work.
func (l *listener) disarm(ctx context.Context) {
	if _, err := l.pool.Exec(ctx, "UPDATE "+l.wake+" SET armed = false WHERE armed"); err != nil && ctx.Err() == nil {
		l.r.log.Warn("txbox relay: cannot disarm the wake-up doorbell", "err", err)
	}
}

// doorbell is one relay loop's (or one group store's) view of its wake-up
// doorbell: a loop at work keeps it disarmed, so that writers do not
// notify; a loop idle for armAfter arms it. Only its loop touches it.
type doorbell struct {
	l     *listener
	armed bool
	idle  time.Duration // how long the loop has been idle, while under armAfter
}

// sync forgets that the doorbell was armed once the listener disarmed
// its table (a reconnect): the loop then arms it again with one more look
// after, as when it first went idle, instead of taking it for armed.
func (d *doorbell) sync() {
	if d.l != nil && d.l.wasReset.Swap(false) {
		d.armed, d.idle = false, 0
	}
}

// worked is told that a round claimed rows: it disarms the doorbell.
func (d *doorbell) worked(ctx context.Context) {
	d.sync()
	d.idle = 0
	if d.armed {
		d.l.disarm(ctx)
		d.armed = false
	}
}

// quiet is told that a round claimed nothing while notifications are
// received, and returns how long to wait before the next round. Just gone
// idle, it looks again soon before asking writers to ring (which costs
// them); then it arms the doorbell and returns 0, to look once more (a
// commit may have slipped in before arming); then it looks again after
// waits that double up to poll, arming again each time (a relay at work
// on the same table disarms it). The looks are for a transaction whose
// INSERT ran before the arming: it sends nothing, and its rows, committed
// after the last look, would otherwise wait a whole poll interval; now
// they wait about as long again as the relay had been armed when they
// were committed. An error arming returns poll.
func (d *doorbell) quiet(ctx context.Context, poll time.Duration) (time.Duration, error) {
	d.sync()
	if d.idle < armAfter {
		d.idle = max(minRecheck, 2*d.idle)
		return d.idle, nil
	}
	if err := d.l.arm(ctx); err != nil {
		return poll, err
	}
	if !d.armed {
		d.armed = true
		return 0, nil
	}
	d.idle = min(2*d.idle, max(poll, armAfter))
	return min(d.idle, poll), nil
}

// release disarms the doorbell if this loop armed it: the loop ends.
func (d *doorbell) release(ctx context.Context) { d.worked(ctx) }

// probeNotify verifies that a notification sent through the pool, as the
// writers' are, reaches a listening connection (behind PgBouncer in
// transaction mode it does not): it notifies channel with payload, then
// waits, up to timeout, until next returns want.
func probeNotify(ctx context.Context, pool txboxdriver.Pool, channel, payload string, timeout time.Duration, next func(context.Context) (string, error)) error {
	if _, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		return fmt.Errorf("probe notification: %w", err)
	}
	want := payload
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		got, err := next(wait)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("no probe notification within %s (is the database behind a pooler in transaction mode?): %w", timeout, err)
		}
		if got == want {
			return nil
		}
	}
}

// maxChannel is PostgreSQL's longest channel name (NAMEDATALEN - 1).
const maxChannel = 63

// notifyChannel is the channel the notify trigger of schema.table sends on
// (txboxmigrate/sql/postgres/outbox/001_create_outbox.sql):
// "txbox_<schema>.<table>", or, when that is over 63 bytes, "txbox_" and
// the MD5 of that name in hex.
func notifyChannel(schema, table string) string {
	ch := "txbox_" + schema + "." + table
	if len(ch) > maxChannel {
		sum := md5.Sum([]byte(ch))
		ch = "txbox_" + hex.EncodeToString(sum[:])
	}
	return ch
}

// resolveSchema returns schema, or the connection's current schema.
func resolveSchema(ctx context.Context, pool txboxdriver.Pool, schema string) (string, error) {
	if schema != "" {
		return schema, nil
	}
	rows, err := pool.Query(ctx, "SELECT current_schema()")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", err
		}
		return "", txboxdriver.ErrNoRows
	}
	if err := rows.Scan(&schema); err != nil {
		return "", err
	}
	return schema, rows.Close()
}

// reset disarms the doorbell, checking that its table is there: it comes
// with migration 3, and without it writers never notify.
func (l *listener) reset(ctx context.Context) error {
	if _, err := l.pool.Exec(ctx, "UPDATE "+l.wake+" SET armed = false WHERE armed"); err != nil {
		if strings.Contains(err.Error(), "42P01") { // undefined_table
			return fmt.Errorf("disarm the wake-up doorbell: its table is missing (it comes with txbox migrate up): %w", err)
		}
		return fmt.Errorf("disarm the wake-up doorbell: %w", err)
	}
	l.wasReset.Store(true)
	return nil
}

// resolve sets the channel and the doorbell table of the relay's table.
func (l *listener) resolve(ctx context.Context) error {
	schema, err := resolveSchema(ctx, l.pool, l.r.cfg.Schema)
	if err != nil {
		return err
	}
	table := l.r.tableName()
	l.channel = notifyChannel(schema, table)
	l.wake = sqlname.Qualified(txboxdriver.Postgres, schema, sqlname.Derived(table, "wake"))
	return nil
}
