package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
)

// Subscriber consumes topics through a Kafka consumer group.
//
// Kafka orders each partition and tracks one committed offset per
// partition, not per-record acks. So: Ack commits the records' offsets
// (synchronously: once Ack returns, a restart resumes after them); Nack
// rewinds the record's partition to it, so that record and every later one
// of that partition are delivered again (Deliveries counts redeliveries
// within this process only: Kafka keeps no count); Dead produces the record
// to the dead-letter topic, then commits it.
//
// Settle records in partition order: committing a record's offset commits
// every earlier record of its partition, so acking record 6 while record 5
// is still being processed would skip 5 after a restart.
// ConsumerSubscriber, for the consumer runtime, which settles concurrently,
// commits only contiguous offsets.
type Subscriber struct {
	cl         *kgo.Client
	deadSuffix string
	trimPrefix string

	mu    sync.Mutex
	count map[tpo]int64 // deliveries of records nacked at least once
}

type tpo struct {
	topic     string
	partition int32
	offset    int64
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// TopicPrefix is the publisher's TopicPrefix: it is cut from the
	// delivered messages' Topic. Default: "".
	TopicPrefix string
	// DeadTopicSuffix names the dead-letter topic: the record's topic plus
	// this suffix. The topic must exist (or the cluster auto-create it).
	// Default: ".dead".
	DeadTopicSuffix string
}

// Delivery is one record delivered to this consumer.
type Delivery struct {
	// Message is the record as published: ID from the Message-Id header,
	// Topic (less the TopicPrefix), Key, Payload, and the other headers.
	Message txbox.Message
	// Record is franz-go's record.
	Record *kgo.Record
	// Deliveries is 1 the first time, and counts Nack redeliveries in this
	// process.
	Deliveries int64
}

// NewSubscriber returns a Subscriber over cl, a client the caller owns and
// closes, created with kgo.ConsumerGroup, kgo.ConsumeTopics and
// kgo.DisableAutoCommit (Ack commits).
func NewSubscriber(cl *kgo.Client, cfg SubscriberConfig) (*Subscriber, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: kafka: nil client", txbox.ErrInvalidConfig)
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		return nil, fmt.Errorf("%w: kafka: the client has no consumer group (kgo.ConsumerGroup)", txbox.ErrInvalidConfig)
	}
	if v, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !v {
		return nil, fmt.Errorf("%w: kafka: the client must use kgo.DisableAutoCommit: Ack commits", txbox.ErrInvalidConfig)
	}
	if cfg.DeadTopicSuffix == "" {
		cfg.DeadTopicSuffix = ".dead"
	}
	return &Subscriber{cl: cl, deadSuffix: cfg.DeadTopicSuffix, trimPrefix: cfg.TopicPrefix, count: map[tpo]int64{}}, nil
}

// Fetch waits for records (until ctx ends) and returns up to max of them.
func (s *Subscriber) Fetch(ctx context.Context, max int) ([]Delivery, error) {
	if max <= 0 {
		max = 1
	}
	fs := s.cl.PollRecords(ctx, max)
	if fs.IsClientClosed() {
		return nil, kgo.ErrClientClosed
	}
	var errs []error
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			errs = append(errs, fmt.Errorf("kafka: fetch %s[%d]: %w", t, p, err))
		}
	})
	var out []Delivery
	s.mu.Lock()
	fs.EachRecord(func(r *kgo.Record) {
		k := tpo{r.Topic, r.Partition, r.Offset}
		n := int64(1)
		if c, ok := s.count[k]; ok {
			n = c
		}
		out = append(out, Delivery{Message: s.message(r), Record: r, Deliveries: n})
	})
	s.mu.Unlock()
	if len(out) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func (s *Subscriber) message(r *kgo.Record) txbox.Message {
	m := txbox.Message{Topic: strings.TrimPrefix(r.Topic, s.trimPrefix), Key: string(r.Key), Payload: r.Value}
	for _, h := range r.Headers {
		if h.Key == txbox.HeaderMessageID {
			m.ID = string(h.Value)
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[h.Key] = string(h.Value)
	}
	return m
}

// Ack commits the deliveries' offsets and waits for the commit.
func (s *Subscriber) Ack(ctx context.Context, ds ...Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	rs := make([]*kgo.Record, len(ds))
	s.mu.Lock()
	for i, d := range ds {
		rs[i] = d.Record
		delete(s.count, tpo{d.Record.Topic, d.Record.Partition, d.Record.Offset})
	}
	s.mu.Unlock()
	if err := s.cl.CommitRecords(ctx, rs...); err != nil {
		return fmt.Errorf("kafka: commit: %w", err)
	}
	return nil
}

// Nack rewinds d's partition to d, so it (and the records after it in that
// partition) is delivered again by a later Fetch.
func (s *Subscriber) Nack(_ context.Context, d Delivery) error {
	r := d.Record
	s.mu.Lock()
	s.count[tpo{r.Topic, r.Partition, r.Offset}] = d.Deliveries + 1
	s.mu.Unlock()
	s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{
		r.Topic: {r.Partition: {Epoch: r.LeaderEpoch, Offset: r.Offset}},
	})
	return nil
}

// Dead produces d to the dead-letter topic (its topic plus DeadTopicSuffix)
// with the header Txbox-Error = reason, then commits d.
func (s *Subscriber) Dead(ctx context.Context, d Delivery, reason string) error {
	r := d.Record
	dr := &kgo.Record{Topic: r.Topic + s.deadSuffix, Key: r.Key, Value: r.Value}
	dr.Headers = append(append(dr.Headers, r.Headers...), kgo.RecordHeader{Key: txbox.HeaderError, Value: []byte(reason)})
	if err := s.cl.ProduceSync(ctx, dr).FirstErr(); err != nil {
		return fmt.Errorf("kafka: dead-letter %s: %w", dr.Topic, err)
	}
	return s.Ack(ctx, d)
}
