package relay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/txbox/txbox/txboxdriver"
)

// dbListener is the one LISTEN connection of a group's database: it
// listens on the notify channel of each of the database's PostgreSQL
// stores and queues a store when its channel rings. Its fields but conn's
// own state are guarded by the group's lock.
type dbListener struct {
	g      *Group
	db     *database
	cancel context.CancelFunc
	done   chan struct{}

	stores   map[string][]*member // wanted: channel → its stores
	dirty    bool                 // stores changed since the connection's last look
	stopWait context.CancelFunc   // ends the connection's current wait, if any
}

// subscribe makes m's channel part of its database's listening connection,
// starting it if it is the first. Called with g.mu held, while running.
func (g *Group) subscribe(m *member) {
	if m.channel == "" {
		return
	}
	l := m.db.listen
	if l == nil {
		ctx, cancel := context.WithCancel(g.runCtx)
		l = &dbListener{g: g, db: m.db, cancel: cancel, done: make(chan struct{}), stores: map[string][]*member{}}
		m.db.listen = l
		g.bg.Add(1)
		go func() {
			defer g.bg.Done()
			defer close(l.done)
			l.run(ctx)
		}()
	}
	l.stores[m.channel] = append(l.stores[m.channel], m)
	l.changed()
}

// unsubscribe takes m's channel out of its database's listening
// connection, closing it with the last. Called with g.mu held.
func (g *Group) unsubscribe(m *member) {
	l := m.db.listen
	if l == nil || m.channel == "" {
		return
	}
	m.r.notifyActive.Store(false)
	l.stores[m.channel] = slices.DeleteFunc(l.stores[m.channel], func(o *member) bool { return o == m })
	if len(l.stores[m.channel]) == 0 {
		delete(l.stores, m.channel)
	}
	if len(l.stores) == 0 {
		l.cancel()
		m.db.listen = nil
		return
	}
	l.changed()
}

func (l *dbListener) changed() {
	l.dirty = true
	if l.stopWait != nil {
		l.stopWait()
	}
}

// source returns the store whose driver and pool the connection uses: the
// first by name. Called with g.mu held.
func (l *dbListener) source() *member {
	var src *member
	for _, ms := range l.stores {
		for _, m := range ms {
			if src == nil || m.name < src.name {
				src = m
			}
		}
	}
	return src
}

// setActive sets whether the listed channels' stores receive
// notifications; active ones are queued, since a commit may have come
// before their LISTEN (or while nobody listened) and their doorbells are
// to be armed. Called with g.mu held.
func (l *dbListener) setActive(channels []string, active bool) {
	for _, ch := range channels {
		for _, m := range l.stores[ch] {
			if active && !m.r.notifyActive.Load() {
				m.r.log.Debug("txbox relay: listening for notifications", "channel", ch)
			}
			m.r.notifyActive.Store(active)
			if active && l.g.running && !m.removed {
				l.g.wake(m)
			}
		}
	}
}

// run listens until ctx ends, reconnecting with backoff; while it is not
// listening the stores poll as usual.
func (l *dbListener) run(ctx context.Context) {
	var backoff time.Duration
	for ctx.Err() == nil {
		err := l.listenOnce(ctx)
		l.g.mu.Lock()
		l.stopWait = nil
		for _, ms := range l.stores {
			for _, m := range ms {
				m.r.notifyActive.Store(false)
				if ctx.Err() == nil {
					m.r.listenFails.Add(1)
				}
			}
		}
		var backoffMax time.Duration
		if src := l.source(); src != nil {
			backoffMax = src.r.cfg.test.BackoffMax
		}
		l.g.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		backoff = nextBackoff(backoff, backoffMax)
		l.g.log.Warn(l.g.prefix+": notifications lost; polling every poll interval until they are back",
			"database", l.db.name, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

func (l *dbListener) listenOnce(ctx context.Context) error {
	l.g.mu.Lock()
	src := l.source()
	l.g.mu.Unlock()
	if src == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	sl := src.r.listen
	conn, err := sl.chans.ListenChannels(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	// Verify that a notification sent through the pool, as the writers'
	// are, reaches this connection (behind PgBouncer in transaction mode it
	// does not).
	probe := fmt.Sprintf("txbox_group_probe_%d", time.Now().UnixNano())
	if err := conn.Listen(ctx, probe); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The probe notifies a channel of its own, its name as the payload.
	err = probeNotify(ctx, sl.pool, probe, probe, src.r.cfg.test.NotifyProbeTimeout, func(ctx context.Context) (string, error) {
		ch, payload, err := conn.Wait(ctx)
		if ch != probe {
			payload = ""
		}
		return payload, err
	})
	if err != nil {
		return err
	}
	if err := conn.Unlisten(ctx, probe); err != nil {
		return fmt.Errorf("unlisten: %w", err)
	}

	heard := map[string]bool{} // the channels this connection LISTENs on
	for first := true; ; first = false {
		l.g.mu.Lock()
		var want map[string][]*member
		if l.dirty || first {
			l.dirty = false
			want = make(map[string][]*member, len(l.stores))
			for ch, ms := range l.stores {
				want[ch] = slices.Clone(ms)
			}
		}
		wait, stop := context.WithCancel(ctx)
		l.stopWait = stop
		l.g.mu.Unlock()

		if want != nil {
			added, err := l.sync(ctx, conn, heard, want)
			l.g.mu.Lock()
			l.setActive(added, true)
			l.g.mu.Unlock()
			if err != nil {
				stop()
				return err
			}
		}
		ch, _, err := conn.Wait(wait)
		stopped := wait.Err() != nil
		stop()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if stopped {
				// The stores changed (stopWait also marked them dirty):
				// LISTEN and UNLISTEN, which fails on a lost connection,
				// then wait again.
				continue
			}
			return err
		}
		l.g.mu.Lock()
		if l.g.running {
			for _, m := range l.stores[ch] {
				if !m.removed {
					l.g.wake(m)
				}
			}
		}
		l.g.mu.Unlock()
	}
}

// sync makes the connection LISTEN on the channels of want and on no
// other, and returns the channels it started listening on. A store whose
// doorbell table is missing is left to poll.
func (l *dbListener) sync(ctx context.Context, conn txboxdriver.Channels, heard map[string]bool, want map[string][]*member) ([]string, error) {
	for ch := range heard {
		if _, ok := want[ch]; !ok {
			if err := conn.Unlisten(ctx, ch); err != nil {
				return nil, fmt.Errorf("unlisten: %w", err)
			}
			delete(heard, ch)
		}
	}
	var added []string
	for ch, ms := range want {
		if heard[ch] {
			continue
		}
		ok := false
		for _, m := range ms {
			if err := m.r.listen.reset(ctx); err != nil {
				if ctx.Err() != nil {
					return added, ctx.Err()
				}
				m.r.log.Warn(l.g.prefix+": no LISTEN/NOTIFY wake-up; polling only", "err", err)
				continue
			}
			ok = true
		}
		if !ok {
			continue
		}
		if err := conn.Listen(ctx, ch); err != nil {
			return added, fmt.Errorf("listen: %w", err)
		}
		heard[ch] = true
		added = append(added, ch)
	}
	return added, nil
}
