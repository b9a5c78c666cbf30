package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/internal/roundtimes"
)

// Relay streams the inserts of one outbox table from its replication slot
// and publishes them. It is safe to run several on one slot: one reads,
// the others wait on its lease.
type Relay struct {
	pool *pgxpool.Pool
	pub  txbox.Publisher
	cfg  Config
	n    names
	log  *slog.Logger

	published  atomic.Int64
	dead       atomic.Int64
	confirmed  atomic.Uint64 // the last LSN the relay confirmed to the server
	maxAckedID atomic.Int64  // the highest row id the broker acknowledged
	oldestHeld atomic.Int64  // created_at (Unix ns) of the oldest row held unsettled, 0: none
	reading    atomic.Bool

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// New returns a relay over pool (which the caller owns and closes) that
// publishes with pub. It checks cfg; it opens nothing.
func New(pool *pgxpool.Pool, pub txbox.Publisher, cfg Config) (*Relay, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	n, err := c.names()
	if err != nil {
		return nil, err
	}
	if pool == nil || pub == nil {
		return nil, fmt.Errorf("%w: cdc.New needs a pool and a publisher", txbox.ErrInvalidConfig)
	}
	return &Relay{pool: pool, pub: pub, cfg: c, n: n, log: c.Logger.With("slot", n.slot)}, nil
}

// Config returns the relay's config, defaults applied.
func (r *Relay) Config() Config { return r.cfg }

// Slot returns the name of the relay's replication slot.
func (r *Relay) Slot() string { return r.n.slot }

// Stats are a relay's counters since it was made, its state now and its
// slot's, as Relay.Stats reads them.
type Stats struct {
	// At is when the stats were read.
	At        time.Time
	Published int64 // messages the broker acknowledged (a redelivery counts again)
	Dead      int64 // messages recorded as dead in the table
	// ConfirmedLSN is the last LSN the relay confirmed to the server.
	ConfirmedLSN string
	// Running: the relay was started and has not stopped.
	Running bool
	// Reading: the relay holds the slot's lease and streams now on a live
	// replication connection. A standby waiting for another relay's lease,
	// and a relay between two sessions (a lost connection, a server
	// restarting), do not read.
	Reading bool
	// BrokerConnected is the publisher's txbox.ConnectionChecker's answer;
	// true for a publisher without one.
	BrokerConnected bool

	// SlotErr is why the slot cannot be read from (Relay.Stats returns it
	// too), or nil: the database could not be read, or the slot is
	// missing, lost or not the relay's (see Check). The slot's figures
	// below are then zero.
	SlotErr error
	// LagBytes is how much WAL the slot holds that the relay has not
	// confirmed, read by every Stats call; WALStatus is its wal_status.
	LagBytes  int64
	WALStatus string
}

// Stats reads the relay's state: its own counters and state, which never
// fail, and its slot's, one read of pg_replication_slots bounded by ctx.
// When the slot cannot be read or is unusable, Stats returns the error
// and the relay's own figures all the same (see Stats.SlotErr). It works
// on a relay that does not run, too.
func (r *Relay) Stats(ctx context.Context) (Stats, error) {
	s := Stats{At: time.Now(), Published: r.published.Load(), Dead: r.dead.Load(),
		ConfirmedLSN: pglogrepl.LSN(r.confirmed.Load()).String(), Reading: r.reading.Load(), BrokerConnected: true}
	select {
	case <-r.Stopped():
	default:
		s.Running = true
	}
	if c, ok := r.pub.(txbox.ConnectionChecker); ok {
		s.BrokerConnected = c.Connected()
	}
	st, err := status(ctx, r.pool, r.n)
	if err == nil {
		err = checkSlot(st)
	}
	if err != nil {
		s.SlotErr = err
		return s, err
	}
	s.LagBytes, s.WALStatus = st.LagBytes, st.WALStatus
	return s, nil
}

// Ready returns nil when the relay, as s shows it, delivers: it runs, its
// slot is usable, it holds the slot's lease and streams, and its broker
// connection is up; else an error naming every reason. A standby waiting
// for another relay's lease is not ready: it delivers nothing until the
// reader stops.
func (s Stats) Ready() error {
	var why []string
	if !s.Running {
		why = append(why, "the relay is not running")
	}
	if s.SlotErr != nil {
		why = append(why, "slot: "+s.SlotErr.Error())
	}
	if s.Running && !s.Reading {
		why = append(why, "not reading the slot (a standby waiting for the lease, or reconnecting)")
	}
	if !s.BrokerConnected {
		why = append(why, "broker not connected")
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New(strings.Join(why, "; "))
}

// ErrAlreadyStarted is returned by Start on a running relay.
var ErrAlreadyStarted = errors.New("txbox cdc: relay already started")

// Start checks what would stop the relay (as Check does: wal_level, the
// slot and the publication) and, when nothing does, starts the relay and
// returns: it then waits for the slot's lease, streams and publishes in
// the background until Stop or until ctx ends (ctx bounds the relay's
// whole run, not only its start). A check that fails on a database error
// that may pass is left to the run, which retries. The relay stops by
// itself on what no retry cures (a missing, lost or invalidated slot,
// wal_level not logical, a publisher closed for good): Stopped is then
// closed and Err says why. Lost connections (the server restarting, a
// network cut) are retried with a doubling wait up to BackoffMax.
func (r *Relay) Start(ctx context.Context) error {
	if err := Check(ctx, r.pool, r.cfg); fatal(err) {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		select {
		case <-r.done:
		default:
			return ErrAlreadyStarted
		}
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.done, r.err = make(chan struct{}), nil
	go func(done chan struct{}) {
		err := r.run(ctx)
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		close(done)
	}(r.done)
	return nil
}

// Stop asks the relay to stop (it finishes the batches in flight and
// confirms them) and waits until it has, or until ctx ends.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closed is a closed channel: Stopped before any start.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Stopped is closed whenever the relay is not running: before Start, and
// once it has stopped (by Stop, by ctx, or by itself; see Err).
func (r *Relay) Stopped() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		return closed
	}
	return r.done
}

// Err returns the error that stopped the relay by itself, once Stopped is
// closed; nil while it runs and after a stop asked by Stop or ctx.
func (r *Relay) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// run waits for the slot's lease, streams and publishes until ctx ends
// (then it returns nil) or until something no retry cures.
func (r *Relay) run(ctx context.Context) error {
	var wait time.Duration
	for {
		began := time.Now()
		err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if fatal(err) {
			r.log.Error("cdc relay stops", "err", err)
			return err
		}
		if time.Since(began) > time.Minute {
			wait = 0
		}
		wait = backoff.Next(wait, 100*time.Millisecond, r.cfg.BackoffMax)
		r.log.Warn("cdc session ended; starting again", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func fatal(err error) bool {
	return errors.Is(err, ErrSlotLost) || errors.Is(err, ErrSlotMissing) || errors.Is(err, ErrNotLogical) ||
		errors.Is(err, txbox.ErrPublisherClosed) || errors.Is(err, txbox.ErrInvalidConfig) || errors.Is(err, errBadRow)
}

// txn is one committed transaction's outbox rows, with the LSN to confirm
// once they are all settled.
type txn struct {
	rows   []row
	end    pglogrepl.LSN
	commit time.Time // the transaction's commit time
	// times are the transaction's stream times, kept when the Observer
	// records batches (roundtimes.BatchRecorder); nil otherwise.
	times *txnTimes
}

// txnTimes: when the walsender sent a transaction's commit, and when the
// relay had read it.
type txnTimes struct {
	commit, sent, received time.Time
}

// session holds the lease for one replication connection.
func (r *Relay) session(ctx context.Context) error {
	l, err := acquireLease(ctx, r.pool, r.n.slot, r.cfg.LeaseTimeout, func() {
		r.log.Info("another relay reads the slot; waiting for its lease to lapse")
	})
	if err != nil {
		return err
	}
	defer l.release()
	if err := checkWALLevel(ctx, l.conn); err != nil {
		return err
	}
	st, err := status(ctx, l.conn, r.n)
	if err != nil {
		return err
	}
	if err := checkSlot(st); err != nil {
		return err
	}
	var version int
	if err := l.conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return fmt.Errorf("server version: %w", err)
	}
	start, err := pglogrepl.ParseLSN(st.ConfirmedFlushLSN)
	if err != nil {
		return fmt.Errorf("slot %s: confirmed_flush_lsn %q: %w", r.n.slot, st.ConfirmedFlushLSN, err)
	}
	rc := r.pool.Config().ConnConfig.Config.Copy()
	if rc.RuntimeParams == nil {
		rc.RuntimeParams = map[string]string{}
	}
	rc.RuntimeParams["replication"] = "database"
	// The text formats decode reads (before PostgreSQL 14).
	rc.RuntimeParams["DateStyle"] = "ISO, MDY"
	rc.RuntimeParams["bytea_output"] = "hex"
	conn, err := pgconn.ConnectConfig(ctx, rc)
	if err != nil {
		return fmt.Errorf("replication connection: %w", err)
	}
	defer conn.Close(context.Background())
	// Start from the slot's confirmed LSN (0/0 means that to the server).
	// From PostgreSQL 14 on, columns come in binary: no hex for payloads.
	args := []string{"proto_version '1'", "publication_names '" + quote(r.n.publication) + "'"}
	if version >= 140000 {
		args = append(args, "binary 'true'")
	}
	if r.cfg.MessagePrefix != "" {
		if version < 140000 {
			return fmt.Errorf("%w: message mode needs PostgreSQL 14 or later (pgoutput's messages option); the server is %d", txbox.ErrInvalidConfig, version)
		}
		args = append(args, "messages 'true'")
	}
	err = pglogrepl.StartReplication(ctx, conn, r.n.slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		return fmt.Errorf("start replication from slot %s: %w", r.n.slot, err)
	}
	r.confirmed.Store(uint64(start))
	r.reading.Store(true)
	defer r.reading.Store(false)
	r.log.Info("cdc relay reads the slot", "from", start.String(), "publication", r.n.publication)

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var acked atomic.Uint64
	acked.Store(uint64(start))
	pipe := make(chan txn, 4*r.cfg.BatchSize)
	pubDone := make(chan error, 1)
	go func() {
		err := r.publishLoop(sctx, pipe, &acked)
		cancel(err)
		pubDone <- err
	}()
	var helpers sync.WaitGroup
	defer helpers.Wait() // before the lease's connection closes
	helpers.Add(4)
	go func() { // heartbeat of the lease
		defer helpers.Done()
		t := time.NewTicker(r.cfg.LeaseTimeout / 3)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if err := l.heartbeat(sctx); err != nil && sctx.Err() == nil {
					cancel(err)
					return
				}
			}
		}
	}()
	go func() {
		defer helpers.Done()
		r.every(sctx, r.cfg.test.CleanupInterval, "cleanup", func(ctx context.Context) error { _, err := r.Cleanup(ctx); return err })
	}()
	go func() {
		defer helpers.Done()
		r.every(sctx, r.cfg.RedriveInterval, "redrive", func(ctx context.Context) error { _, err := r.Redriven(ctx); return err })
	}()
	go func() {
		defer helpers.Done()
		r.sampleLoop(sctx)
	}()

	recvErr := r.receive(sctx, conn, pipe, &acked, start)
	cancel(recvErr)
	pubErr := <-pubDone
	// Confirm what the last batch settled before closing.
	if a := pglogrepl.LSN(acked.Load()); a > pglogrepl.LSN(r.confirmed.Load()) && !conn.IsClosed() {
		if err := pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: a}); err == nil {
			r.confirmed.Store(uint64(a))
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if pubErr != nil && !errors.Is(pubErr, context.Canceled) {
		return pubErr
	}
	if c := context.Cause(sctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return recvErr
}

// receive reads the stream: it assembles each committed transaction's
// outbox rows, hands them to the publisher in commit order, and tells the
// server every StatusInterval (and when asked) the LSN it confirms: the
// publisher's watermark, or, when every transaction received is settled
// and none is open, the server's WAL end from its last keepalive, so that
// an idle stream does not hold WAL back.
func (r *Relay) receive(ctx context.Context, conn *pgconn.PgConn, pipe chan<- txn, acked *atomic.Uint64, start pglogrepl.LSN) error {
	_, timed := r.cfg.Observer.(roundtimes.BatchRecorder)
	rels := map[uint32]*relation{}
	var cur *txn
	pushed := start // end LSN of the last transaction handed over
	var idleEnd pglogrepl.LSN
	next := time.Now().Add(r.cfg.StatusInterval)
	send := func() error {
		lsn := pglogrepl.LSN(acked.Load())
		if cur == nil && lsn >= pushed && idleEnd > lsn {
			lsn = idleEnd
		}
		if last := pglogrepl.LSN(r.confirmed.Load()); lsn < last {
			lsn = last
		}
		next = time.Now().Add(r.cfg.StatusInterval)
		if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: lsn}); err != nil {
			return fmt.Errorf("standby status update: %w", err)
		}
		r.confirmed.Store(uint64(lsn))
		return nil
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		if !time.Now().Before(next) {
			if err := send(); err != nil {
				return err
			}
		}
		rctx, rcancel := context.WithDeadline(ctx, next)
		raw, err := conn.ReceiveMessage(rctx)
		rcancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("replication stream: %w", err)
		}
		var data []byte
		switch m := raw.(type) {
		case *pgproto3.CopyData:
			data = m.Data
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return err
			}
			if cur == nil {
				idleEnd = k.ServerWALEnd
			}
			if k.ReplyRequested {
				next = time.Now()
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return err
			}
			msg, err := pglogrepl.Parse(x.WALData)
			if err != nil {
				return fmt.Errorf("decode pgoutput: %w", err)
			}
			switch m := msg.(type) {
			case *pglogrepl.RelationMessage:
				rels[m.RelationID] = r.relation(m)
			case *pglogrepl.BeginMessage:
				cur = &txn{commit: m.CommitTime}
			case *pglogrepl.LogicalDecodingMessage:
				// Message mode's events: transactional ones only (Add's),
				// each delivered with its transaction.
				if cur == nil || !m.Transactional || r.cfg.MessagePrefix == "" || m.Prefix != r.cfg.MessagePrefix {
					continue
				}
				cur.rows = append(cur.rows, decodeMessage(m, cur.commit))
			case *pglogrepl.InsertMessage:
				rel := rels[m.RelationID]
				if cur == nil || rel == nil || !rel.ours || r.cfg.MessagePrefix != "" {
					continue
				}
				rw, err := rel.decode(m.Tuple)
				if err != nil {
					return err
				}
				cur.rows = append(cur.rows, rw)
			case *pglogrepl.CommitMessage:
				if cur == nil {
					continue
				}
				cur.end = m.TransactionEndLSN
				t := *cur
				cur = nil
				if timed {
					t.times = &txnTimes{commit: t.commit, sent: x.ServerTime, received: time.Now()}
				}
				for handed := false; !handed; {
					wait := time.Until(next)
					select {
					case pipe <- t:
						handed = true
						pushed = t.end
					case <-ctx.Done():
						return nil
					case <-time.After(wait):
						if err := send(); err != nil {
							return err
						}
					}
				}
			}
		}
	}
}

// every runs fn every interval until ctx ends, logging what failed
// (cleanup: Cleanup; redrive: Redriven).
func (r *Relay) every(ctx context.Context, interval time.Duration, what string, fn func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("cdc "+what, "err", err)
		}
	}
}

// Cleanup deletes delivered rows older than Retention (in message mode:
// redriven dead letters published more than Retention ago), in batches of
// 1000: rows, not dead nor redriven and waiting (Redriven), whose id is at most the highest id the broker
// acknowledged to this relay. It returns how many it deleted.
func (r *Relay) Cleanup(ctx context.Context) (int64, error) {
	upto := r.maxAckedID.Load()
	if r.cfg.MessagePrefix != "" {
		// Message mode: the table holds dead letters only; a redriven
		// one that was published is what there is to delete.
		tag, err := r.pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE published_at < now() - $1::interval`, r.n.table),
			fmt.Sprintf("%d microseconds", r.cfg.Retention.Microseconds()))
		return tag.RowsAffected(), err
	}
	if upto == 0 {
		return 0, nil
	}
	var total int64
	for {
		tag, err := r.pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE id IN (SELECT id FROM %[1]s
		    WHERE id <= $1 AND dead_at IS NULL AND (last_error IS NULL OR published_at IS NOT NULL) AND created_at < now() - $2::interval ORDER BY id LIMIT %d)`, r.n.table, DefaultCleanupBatch),
			upto, fmt.Sprintf("%d microseconds", r.cfg.Retention.Microseconds()))
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < DefaultCleanupBatch {
			return total, nil
		}
	}
}
