package natsjs

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// minLease is the shortest default lease (SubscriberConfig.Lease): a
// process stalled for two thirds of its lease (a GC pause, a loaded
// machine) has its messages redelivered under it.
const minLease = time.Second

// leaseFor is the lease of a subscription to a durable with ackWait:
// cfg (SubscriberConfig.Lease) or, when 0, a quarter of ackWait, at least
// minLease; 0 (no lease) when it is negative or not shorter than ackWait.
func leaseFor(cfg, ackWait time.Duration) time.Duration {
	lease := cfg
	if lease == 0 {
		lease = max(ackWait/4, minLease)
	}
	if lease < 0 || ackWait <= 0 || lease >= ackWait {
		return 0
	}
	return lease
}

// leaser keeps the messages a subscription holds (queued, or handed out
// and not settled) due for redelivery within its lease rather than the
// durable's AckWait: it sends each message a NAK with the lease as its
// delay when it arrives, and again for every message it still holds each
// third of the lease. The server redelivers a message naked with a delay
// once the delay has passed, and until then keeps it pending for the
// subscription, whose ACK, NAK or TERM settles it as usual: so while the
// process lives its messages stay its own, and when it dies they come
// back a lease later. A renewal is sent for all the held messages at once
// (the server re-arms its redelivery timer 10ms after each NAK with a
// delay: NAKs spread evenly would keep putting it off).
//
// The NAK is sent as its bytes, not with Msg.NakWithDelay: nats.go counts
// a message it sent any NAK for as settled and refuses its later ACK.
// The NAKs are published on the subscription's connection, the one its
// ACKs go out on, under mu: once release returns, no renewal of the
// message can follow its settlement.
type leaser struct {
	nc   *nats.Conn
	body []byte // the NAK with the lease as its delay
	mu   sync.Mutex
	held map[jetstream.Msg]struct{} // nil once stopped
	done chan struct{}
}

func newLeaser(nc *nats.Conn, lease time.Duration) *leaser {
	l := &leaser{nc: nc, body: fmt.Appendf(nil, "-NAK {\"delay\": %d}", lease.Nanoseconds()),
		held: map[jetstream.Msg]struct{}{}, done: make(chan struct{})}
	go l.loop(lease / 3)
	return l
}

// hold leases m now and renews its lease until release (or stop).
func (l *leaser) hold(m jetstream.Msg) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return
	}
	l.held[m] = struct{}{}
	_ = l.nc.Publish(m.Reply(), l.body) // lost: m waits its AckWait instead
}

// release stops renewing m's lease: m is about to be settled.
func (l *leaser) release(m jetstream.Msg) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, m)
}

func (l *leaser) loop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.renew()
		case <-l.done:
			return
		}
	}
}

func (l *leaser) renew() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for m := range l.held {
		_ = l.nc.Publish(m.Reply(), l.body)
	}
}

// stop ends the renewals; the messages still held come back a lease after
// their last one.
func (l *leaser) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil {
		l.held = nil
		close(l.done)
	}
}
