package txboxkafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/wire"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Prefix is put before every message topic to name the Kafka topic;
	// CheckPrefix says what it may hold. Default: "" (Kafka topic =
	// message topic).
	Prefix string
	// CloudEventsSource, when set, adds the CloudEvents binary-mode
	// attributes as headers (Kafka protocol binding): ce_specversion 1.0,
	// ce_id = message id, ce_source = CloudEventsSource, ce_type = topic,
	// ce_time = created-at; the Content-Type header (datacontenttype) is
	// written as content-type, the binding's name (Content-Type without
	// CloudEvents). The ce_ names (any case) are then reserved:
	// CheckMessage refuses a message whose own headers use one, and the
	// relay parks it dead. Default: "" (none).
	CloudEventsSource string
}

// CloudEventsPrefix is put before the CloudEvents attribute names in the
// headers (the Kafka protocol binding's prefix).
const CloudEventsPrefix = "ce_"

// ContentTypeHeader is the name the Kafka protocol binding of CloudEvents
// gives the content type; without CloudEvents it is Content-Type.
const ContentTypeHeader = "content-type"

// Publisher produces messages to Kafka; see the package doc.
type Publisher struct {
	cl  *kgo.Client
	cfg PublisherConfig

	// txnID is the client's transactional id; "" for the idempotent
	// producer. With one, Publish calls take turns (txnMu): a client has
	// one transaction open at a time.
	txnID        string
	buffers      bool // the client lingers or flushes manually: produce flushes
	txnMu        sync.Mutex
	broken       error // under txnMu: the client can never commit again
	abortPending bool  // under txnMu: the last abort did not get through
	owned        bool  // made by FromURL: Close closes cl
}

var (
	_ txbox.Publisher      = (*Publisher)(nil)
	_ txbox.MessageChecker = (*Publisher)(nil)
)

// NewPublisher returns a Publisher over cl, a client the caller made;
// whoever created it closes it. cl must keep franz-go's producer defaults acks=all and idempotent
// writes; a client configured otherwise is an error.
//
// Each Publish call waits for its records' acks, so it does not wait out
// the client's kgo.ProducerLinger (franz-go's default is 10ms): while a
// call waits, it flushes the client (kgo.Client.Flush), which stops the
// linger of every record the client buffers meanwhile, including records
// produced on cl by others. A client with kgo.ManualFlushing works the
// same way. The client's other settings are left as they are.
//
// A client made with kgo.TransactionalID makes a transactional Publisher:
// each Publish call is one Kafka transaction, committed before Publish
// returns (see the package doc, "Transactions"). Such a client must serve
// this Publisher only: its transactions take in every record it produces.
func NewPublisher(cl *kgo.Client, cfg PublisherConfig) (*Publisher, error) {
	if err := CheckPrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: kafka: Prefix %w", txbox.ErrInvalidConfig, err)
	}
	if cl == nil {
		return nil, fmt.Errorf("%w: kafka: nil client", txbox.ErrInvalidConfig)
	}
	if v, ok := cl.OptValue(kgo.DisableIdempotentWrite).(bool); ok && v {
		return nil, fmt.Errorf("%w: kafka: the client disables idempotent writes", txbox.ErrInvalidConfig)
	}
	if a, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && a != kgo.AllISRAcks() {
		return nil, fmt.Errorf("%w: kafka: the client does not require acks from all in-sync replicas", txbox.ErrInvalidConfig)
	}
	p := &Publisher{cl: cl, cfg: cfg}
	linger, _ := cl.OptValue(kgo.ProducerLinger).(time.Duration)
	manual, _ := cl.OptValue(kgo.ManualFlushing).(bool)
	p.buffers = linger > 0 || manual
	if vs := cl.OptValues(kgo.TransactionalID); len(vs) == 2 {
		if set, _ := vs[1].(bool); set {
			p.txnID, _ = vs[0].(string)
			if p.txnID == "" {
				return nil, fmt.Errorf("%w: kafka: the client's transactional id is empty", txbox.ErrInvalidConfig)
			}
			if err := CheckTransactionalID(p.txnID); err != nil {
				return nil, fmt.Errorf("%w: kafka: the client's transactional id %w", txbox.ErrInvalidConfig, err)
			}
		}
	}
	return p, nil
}

// TransactionalID returns the transactional id of the Publisher's client,
// or "" when the Publisher uses the idempotent producer without
// transactions.
func (p *Publisher) TransactionalID() string { return p.txnID }

// CheckMessage refuses, with txbox.Reject wrapping txbox.ErrReservedHeader,
// a message with a header whose name begins with "ce_" (any case) while
// CloudEventsSource is set: those names are the CloudEvents attributes the
// Publisher writes. See txbox.MessageChecker.
func (p *Publisher) CheckMessage(m txbox.Message) error {
	if p.cfg.CloudEventsSource == "" {
		return nil
	}
	for k := range m.Headers {
		if wire.HasPrefixFold(k, CloudEventsPrefix) {
			return txbox.Reject(fmt.Errorf("txboxkafka: header name %q is reserved: with CloudEventsSource set, ce_* headers (any case) are the CloudEvents attributes txbox writes: %w",
				k, txbox.ErrReservedHeader))
		}
	}
	return nil
}

// Record returns the Kafka record for m; see the package doc and
// docs/reference/wire-format.md: the user headers (the Content-Type header, in any
// case, as Content-Type, or content-type with CloudEvents), Txbox-Created-At, the CloudEvents
// attributes if configured, and Txbox-Message-Id last.
func (p *Publisher) Record(m txbox.Message) *kgo.Record {
	r := &kgo.Record{Topic: p.cfg.Prefix + m.Topic, Value: m.Payload}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	ce := p.cfg.CloudEventsSource != ""
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers)+7)
	for k, v := range m.Headers {
		switch {
		case txbox.IsReservedHeader(k): // rows written by plain SQL are not validated by Add
			continue
		case ce && wire.HasPrefixFold(k, CloudEventsPrefix): // CheckMessage refuses these
			continue
		case wire.IsContentType(k):
			k = wire.ContentTypeHeader
			if ce {
				k = ContentTypeHeader
			}
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	if !m.CreatedAt.IsZero() {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: txbox.HeaderCreatedAt, Value: []byte(wire.Time(m.CreatedAt))})
	}
	if ce {
		for _, a := range wire.CloudEvents(m.ID, m.Topic, p.cfg.CloudEventsSource, m.CreatedAt) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "ce_" + a.Name, Value: []byte(a.Value)})
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: txbox.HeaderMessageID, Value: []byte(m.ID)})
	return r
}

// Publish produces msgs, all in flight at once, and waits for every ack or
// for ctx to end; see txbox.Publisher. A transactional Publisher produces
// them in one transaction and commits it before it returns: a nil error
// for a message means its transaction committed (see publishTxn).
func (p *Publisher) Publish(ctx context.Context, msgs []txbox.Message) []error {
	if p.txnID != "" {
		return p.publishTxn(ctx, msgs)
	}
	return p.produce(ctx, msgs)
}

// produce produces msgs, all in flight at once, and waits for every ack or
// for ctx to end. A client that buffers records (a ProducerLinger, or
// ManualFlushing) is flushed while the call waits: the caller waits for
// the acks, so a linger would only delay them.
func (p *Publisher) produce(ctx context.Context, msgs []txbox.Message) []error {
	errs := make([]error, len(msgs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(len(msgs))
	for i := range msgs {
		p.cl.Produce(ctx, p.Record(msgs[i]), func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				errs[i] = classify(err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	if p.buffers {
		// Flush until this call's records are answered, not until the
		// client's buffer is empty: other calls may keep producing.
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { _ = p.cl.Flush(fctx) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		// Records already in flight cannot be cancelled under
		// idempotence; their outcome is unknown and they stay transient.
		mu.Lock()
		defer mu.Unlock()
		out := make([]error, len(msgs))
		copy(out, errs)
		for i := range out {
			if out[i] == nil {
				out[i] = fmt.Errorf("txboxkafka: waiting for ack: %w", ctx.Err())
			}
		}
		return out
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// classify wraps record errors that concern the record itself with
// txbox.Reject.
func classify(err error) error {
	switch {
	case errors.Is(err, kerr.MessageTooLarge),
		errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.CorruptMessage),
		errors.Is(err, kerr.InvalidTopicException),
		errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.UnknownTopicOrPartition):
		// franz-go fails a record with UnknownTopicOrPartition only after
		// the cluster answered so repeatedly (UnknownTopicRetries).
		return txbox.Reject(fmt.Errorf("txboxkafka: %w", err))
	}
	return fmt.Errorf("txboxkafka: %w", err)
}
