package txboxkafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// DefaultDeadLetterSuffix is SubscriberConfig.DeadLetterSuffix's default.
const DefaultDeadLetterSuffix = ".dead"

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// DeadLetterSuffix names a binding's dead-letter topic: TOPIC+suffix.
	// The topic must exist (CheckBinding verifies it). Default:
	// DefaultDeadLetterSuffix (".dead").
	DeadLetterSuffix string
	// MaxRetryWait caps how long Retry waits before it re-produces the
	// record. Default: 1s.
	MaxRetryWait time.Duration
}

// Binding returns the binding of consumer group group on topic, for
// consumer.HandlerConfig.Binding: "TOPIC/GROUP".
func Binding(topic, group string) string { return topic + "/" + group }

// ParseBinding splits a binding made by Binding.
func ParseBinding(b string) (topic, group string, err error) {
	topic, group, ok := strings.Cut(b, "/")
	if !ok || topic == "" || group == "" {
		return "", "", fmt.Errorf("txboxkafka: binding %q is not TOPIC/GROUP (build it with txboxkafka.Binding)", b)
	}
	return topic, group, nil
}

// Subscriber is the Kafka side of a consumer.Consumer. A binding is a
// topic and the consumer group reading it (see Binding).
//
// Kafka commits one offset per partition, and the consumer runtime settles
// deliveries concurrently, so the subscriber commits an offset only once
// every earlier record of its partition is settled (acked, retried or
// dead-lettered). Kafka cannot redeliver one record: Retry waits (at most
// MaxRetryWait), produces a copy to the same topic and key with
// Txbox-Deliveries = n+1, and settles the original (the copy goes behind the
// records published meanwhile: per-key order is not kept across a retry);
// the topic's other groups settle such a copy unseen.
// DeadLetter produces a copy to TOPIC+DeadLetterSuffix with Txbox-Error;
// DeadLetters lists, redrives and discards them. A record with
// HeaderRedriveFor (a redriven dead letter) is handed out only to the
// binding it names; other groups settle it unseen.
type Subscriber struct {
	cl  *kgo.Client
	cfg SubscriberConfig
}

var _ txbox.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber over cl, a client the caller made;
// whoever created it closes it. cl answers CheckBinding's metadata
// requests; it needs no consumer group.
//
// franz-go fixes a client's consumer group, its topics and its rebalance
// callbacks when the client is created, so each Subscribe creates the
// group member it needs from cl.Opts() (seeds, TLS, SASL, fetch settings
// …) plus the group's options, and the subscription's Close closes that
// member. The member also produces the retry and dead-letter copies, so
// cl must not be transactional (kgo.TransactionalID). The member reads
// read_committed: it never hands out a record of an aborted transaction.
func NewSubscriber(cl *kgo.Client, cfg SubscriberConfig) (*Subscriber, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: kafka: nil client", txbox.ErrInvalidConfig)
	}
	if vs := cl.OptValues(kgo.TransactionalID); len(vs) == 2 && vs[1] == true {
		return nil, fmt.Errorf("%w: kafka: the subscriber's client has a transactional id; give it a client without one", txbox.ErrInvalidConfig)
	}
	if cfg.MaxRetryWait < 0 {
		return nil, fmt.Errorf("%w: kafka: negative MaxRetryWait", txbox.ErrInvalidConfig)
	}
	if cfg.DeadLetterSuffix == "" {
		cfg.DeadLetterSuffix = DefaultDeadLetterSuffix
	}
	if cfg.MaxRetryWait == 0 {
		cfg.MaxRetryWait = time.Second
	}
	return &Subscriber{cl: cl, cfg: cfg}, nil
}

// DeadLetterTopic is where the dead letters of a binding on topic go.
func (s *Subscriber) DeadLetterTopic(topic string) string { return topic + s.cfg.DeadLetterSuffix }

// CheckBinding checks that the topic and its dead-letter topic exist.
func (s *Subscriber) CheckBinding(ctx context.Context, binding string) error {
	topic, _, err := ParseBinding(binding)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range []string{topic, s.DeadLetterTopic(topic)} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return fmt.Errorf("txboxkafka: metadata: %w", err)
	}
	var problems []string
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			problems = append(problems, fmt.Sprintf("topic %s: %v", *t.Topic, err))
		}
	}
	if len(problems) > 0 {
		return errors.New("txboxkafka: " + strings.Join(problems, "; "))
	}
	return nil
}

// Subscribe joins the binding's group with a new group member client
// made from the Subscriber's client's options; see NewSubscriber.
func (s *Subscriber) Subscribe(ctx context.Context, binding string, prefetch int) (txbox.Subscription, error) {
	topic, group, err := ParseBinding(binding)
	if err != nil {
		return nil, err
	}
	sub := &subscription{s: s, binding: binding, prefetch: max(prefetch, 1), parts: map[tp]*partition{}}
	// The group's options come last: they win over any in cl's.
	opts := append(append([]kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, s.cl.Opts()...),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.AutoCommitMarks(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // never a record of an aborted transaction
		kgo.OnPartitionsLost(sub.forget), kgo.OnPartitionsRevoked(sub.revoked))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("txboxkafka: %w", err)
	}
	sub.cl = cl
	return sub, nil
}

type tp struct {
	topic string
	part  int32
}

// partition tracks the delivered, unsettled offsets of one partition.
type partition struct {
	pending []int64 // delivered offsets in order
	settled map[int64]bool
	epoch   map[int64]int32
}

type subscription struct {
	s        *Subscriber
	cl       *kgo.Client
	binding  string
	prefetch int

	mu    sync.Mutex
	buf   []*kgo.Record
	parts map[tp]*partition
}

func (sub *subscription) revoked(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	_ = cl.CommitMarkedOffsets(ctx)
	sub.forget(ctx, cl, lost)
}

// forget drops the tracking of partitions this member no longer owns:
// their unsettled records go to the new owner.
func (sub *subscription) forget(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for t, ps := range lost {
		for _, p := range ps {
			delete(sub.parts, tp{t, p})
		}
	}
	keep := sub.buf[:0]
	for _, r := range sub.buf {
		if _, ok := sub.parts[tp{r.Topic, r.Partition}]; ok {
			keep = append(keep, r)
		}
	}
	sub.buf = keep
}

// Next returns the next record, fetching when the buffer is empty.
func (sub *subscription) Next(ctx context.Context) (txbox.Delivery, error) {
	for {
		sub.mu.Lock()
		if len(sub.buf) > 0 {
			r := sub.buf[0]
			sub.buf = sub.buf[1:]
			sub.mu.Unlock()
			if !sub.mine(r) {
				sub.settle(r)
				continue
			}
			return &delivery{sub: sub, r: r}, nil
		}
		sub.mu.Unlock()
		fs := sub.cl.PollRecords(ctx, sub.prefetch)
		if fs.IsClientClosed() {
			return nil, kgo.ErrClientClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) {
			errs = append(errs, fmt.Errorf("txboxkafka: fetch %s[%d]: %w", t, p, err))
		})
		sub.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			p := sub.parts[k]
			if p == nil {
				p = &partition{settled: map[int64]bool{}, epoch: map[int64]int32{}}
				sub.parts[k] = p
			}
			p.pending = append(p.pending, r.Offset)
			p.epoch[r.Offset] = r.LeaderEpoch
			sub.buf = append(sub.buf, r)
		})
		n := len(sub.buf)
		sub.mu.Unlock()
		if n == 0 && len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
	}
}

// mine reports whether r is for this binding: not a retry copy another
// group made (Txbox-Binding) nor a dead letter redriven for another group
// (HeaderRedriveFor). Publishers cannot set either header (Txbox-* is
// reserved).
func (sub *subscription) mine(r *kgo.Record) bool {
	for _, k := range []string{txbox.HeaderBinding, HeaderRedriveFor} {
		if b, ok := header(r, k); ok && b != sub.binding {
			return false
		}
	}
	return true
}

// settle records r as done and marks for commit the offset after the
// longest settled prefix of its partition.
func (sub *subscription) settle(r *kgo.Record) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	p := sub.parts[tp{r.Topic, r.Partition}]
	if p == nil {
		return // partition revoked meanwhile: the new owner redelivers
	}
	p.settled[r.Offset] = true
	last, epoch, moved := int64(-1), int32(-1), false
	for len(p.pending) > 0 && p.settled[p.pending[0]] {
		last, epoch, moved = p.pending[0], p.epoch[p.pending[0]], true
		delete(p.settled, last)
		delete(p.epoch, last)
		p.pending = p.pending[1:]
	}
	if moved {
		sub.cl.MarkCommitOffsets(map[string]map[int32]kgo.EpochOffset{r.Topic: {r.Partition: {Epoch: epoch, Offset: last + 1}}})
	}
}

// Close commits what is settled, leaves the group and closes the
// subscription's group member; unsettled records go to the group's next
// owner of their partitions.
func (sub *subscription) Close(ctx context.Context) error {
	err := sub.cl.CommitMarkedOffsets(ctx)
	sub.cl.Close()
	return err
}

type delivery struct {
	sub *subscription
	r   *kgo.Record
}

// header returns the first value of header key in r.
func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// deliveries is the record's delivery count: its Txbox-Deliveries when it
// is a retry copy this binding made (Txbox-Binding names it), else 1. A
// producer's Txbox-Deliveries steers nothing.
func deliveries(r *kgo.Record, binding string) int {
	if b, _ := header(r, txbox.HeaderBinding); b != binding {
		return 1
	}
	v, _ := header(r, txbox.HeaderDeliveries)
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	return 1
}

// Message returns the message (docs/reference/wire-format.md): id = the
// Txbox-Message-Id header, key = record key, created-at from
// Txbox-Created-At, the other headers as text, the first of repeated ones;
// Txbox-Message-Id, Txbox-Created-At, Txbox-Deliveries, Txbox-Binding and
// Txbox-Redrive-For are taken out of the headers.
func (d *delivery) Message() txbox.Received {
	m := txbox.Message{Topic: d.r.Topic, Key: string(d.r.Key), Payload: d.r.Value}
	for _, h := range d.r.Headers {
		switch h.Key {
		case txbox.HeaderMessageID:
			if m.ID == "" {
				m.ID = string(h.Value)
			}
		case txbox.HeaderCreatedAt:
			if m.CreatedAt.IsZero() {
				m.CreatedAt = wire.ParseTime(string(h.Value))
			}
		case txbox.HeaderDeliveries, txbox.HeaderBinding, HeaderRedriveFor:
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			if _, dup := m.Headers[h.Key]; !dup {
				m.Headers[h.Key] = string(h.Value)
			}
		}
	}
	return txbox.Received{Message: m, Deliveries: deliveries(d.r, d.sub.binding), Binding: d.sub.binding}
}

func (d *delivery) Ack(context.Context) error {
	d.sub.settle(d.r)
	return nil
}

// copyTo produces a copy of the record to topic with the delivery count
// and extra headers, then settles the original.
func (d *delivery) copyTo(ctx context.Context, topic string, n int, extra ...kgo.RecordHeader) error {
	c := &kgo.Record{Topic: topic, Key: d.r.Key, Value: d.r.Value}
	for _, h := range d.r.Headers {
		if h.Key != txbox.HeaderDeliveries && h.Key != txbox.HeaderError && h.Key != txbox.HeaderBinding {
			c.Headers = append(c.Headers, h)
		}
	}
	c.Headers = append(c.Headers, kgo.RecordHeader{Key: txbox.HeaderDeliveries, Value: []byte(strconv.Itoa(n))},
		kgo.RecordHeader{Key: txbox.HeaderBinding, Value: []byte(d.sub.binding)})
	c.Headers = append(c.Headers, extra...)
	if err := d.sub.cl.ProduceSync(ctx, c).FirstErr(); err != nil {
		return fmt.Errorf("txboxkafka: produce to %s: %w", topic, err)
	}
	d.sub.settle(d.r)
	return nil
}

func (d *delivery) Retry(ctx context.Context, delay time.Duration) error {
	t := time.NewTimer(min(delay, d.sub.s.cfg.MaxRetryWait))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.copyTo(ctx, d.r.Topic, deliveries(d.r, d.sub.binding)+1)
}

func (d *delivery) DeadLetter(ctx context.Context, cause error) error {
	msg := ""
	if cause != nil {
		msg = cause.Error()
	}
	return d.copyTo(ctx, d.sub.s.DeadLetterTopic(d.r.Topic), deliveries(d.r, d.sub.binding), kgo.RecordHeader{Key: txbox.HeaderError, Value: []byte(msg)})
}
